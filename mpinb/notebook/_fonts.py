"""Chinese that renders: plots in a Chinese notebook draw their labels with a CJK font.

Matplotlib's own fonts have no Chinese glyphs, so a Chinese label becomes a row of boxes. When
the notebook speaks Chinese (:mod:`mpinb._language`), :func:`use_a_cjk_font` puts the first CJK
font this machine has in front of matplotlib's sans-serif list; with none, it says once what to
install. Matplotlib caches its font list, so a font installed after that cache was built is
looked for among the system's font files too.
"""

from __future__ import annotations

import importlib.util
import os
import re
import warnings

# Families that cover Simplified Chinese, best first: Linux, then macOS and Windows.
CJK_FAMILIES = (
    "Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "Source Han Sans CN", "WenQuanYi Micro Hei",
    "WenQuanYi Zen Hei", "Droid Sans Fallback", "AR PL UMing CN", "PingFang SC", "Hiragino Sans GB",
    "Heiti SC", "STHeiti", "Microsoft YaHei", "SimHei", "Noto Sans CJK JP",
)
_CJK_FILE = re.compile(r"(notosanscjk|notoserifcjk|sourcehan|wqy|droidsansfallback|uming|ukai|msyh|simhei|pingfang)",
                       re.IGNORECASE)
NO_FONT = ("Chinese labels in plots need a font with Chinese characters, and this machine has none: "
           "install one (Debian or Ubuntu: `sudo apt install fonts-noto-cjk`; Fedora: "
           "`sudo dnf install google-noto-sans-cjk-fonts`; macOS and Windows have one), then restart "
           "the kernel. Until then, plots show a box for each Chinese character.")


def use_a_cjk_font() -> str | None:
    """Make matplotlib draw Chinese with a CJK font; the family chosen, or ``None``: without
    matplotlib (nothing to draw), or with a warning that says what to install when this machine
    has no CJK font."""
    if importlib.util.find_spec("matplotlib") is None:
        return None
    from matplotlib import font_manager, rcParams

    family = _installed_cjk_family(font_manager.fontManager)
    if family is None:
        for path in font_manager.findSystemFonts():
            if _CJK_FILE.search(os.path.basename(path)):
                try:
                    font_manager.fontManager.addfont(path)
                except (OSError, RuntimeError, ValueError):
                    continue
        family = _installed_cjk_family(font_manager.fontManager)
    if family is None:
        warnings.warn(NO_FONT, stacklevel=2)
        return None
    rcParams["font.sans-serif"] = [family] + [f for f in rcParams["font.sans-serif"] if f != family]
    rcParams["font.family"] = "sans-serif"
    rcParams["axes.unicode_minus"] = False  # a CJK font's hyphen-minus, where it lacks U+2212
    return family


def _installed_cjk_family(manager) -> str | None:
    names = {entry.name for entry in manager.ttflist}
    return next((family for family in CJK_FAMILIES if family in names), None)
