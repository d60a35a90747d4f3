"""The language of what mpinb says to learners: English or Simplified Chinese.

It covers check verdicts and hints, hang diagnoses and the most common errors.

Each sentence is written once, in English, as a ``str.format`` template; :func:`say` looks the
template up in the current language's catalog (``mpinb/_zh.py``) and falls back to English for any
sentence not translated. The language is, first, what :func:`set_language` chose; then
``$MPINB_LANGUAGE``; then the notebook's own folder (Jupyter tells each kernel its notebook's path,
and starts it in that folder: a notebook under a ``zh`` folder speaks Chinese); then the locale;
else English.
"""

from __future__ import annotations

import os

LANGUAGES = ("en", "zh")
_chosen: str | None = None


def set_language(code: str | None) -> None:
    """Choose the language of what mpinb says from now on in this process.

    :param code: ``"zh"`` (Simplified Chinese) or ``"en"``; ``None`` goes back to choosing
        automatically (``$MPINB_LANGUAGE``, the notebook's folder, the system's locale).
    :raises ValueError: another language.
    """
    global _chosen
    if code is not None and _normalise(code) is None:
        raise ValueError(f"mpinb speaks {' and '.join(map(repr, LANGUAGES))}, not {code!r}")
    _chosen = None if code is None else _normalise(code)


def language() -> str:
    """The language in use: ``"en"`` or ``"zh"``."""
    if _chosen is not None:
        return _chosen
    explicit = _normalise(os.environ.get("MPINB_LANGUAGE", ""))
    if explicit:
        return explicit
    notebook = os.environ.get("JPY_SESSION_NAME", "")
    if any(_normalise(part) == "zh" for part in notebook.replace("\\", "/").split("/")[:-1]):
        return "zh"
    if not notebook and _normalise(os.path.basename(os.getcwd())) == "zh":
        return "zh"  # a kernel runs in its notebook's folder (JupyterLab, nbclient, the docs build)
    for variable in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = os.environ.get(variable)
        if value:
            return "zh" if _normalise(value) == "zh" else "en"
    return "en"


def _normalise(code: str) -> str | None:
    """``zh``, ``zh_CN.UTF-8``, ``zh-Hans`` -> ``"zh"``; ``en``, ``C``, ``en_GB`` -> ``"en"``."""
    head = code.strip().lower().replace("-", "_").split(".")[0].split("_")[0]
    if head == "zh":
        return "zh"
    if head in ("en", "c", "posix"):
        return "en"
    return None


def say(english: str, /, **fields: object) -> str:
    """``english`` (a ``str.format`` template) in the current language, filled with ``fields``."""
    template = english
    if language() == "zh":
        from ._zh import ZH

        template = ZH.get(english, english)
    return template.format(**fields) if fields else template
