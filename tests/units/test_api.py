"""The package's exports (mpinb/__init__.py): every public name resolves, so a rename cannot break `import mpinb`."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.unit, pytest.mark.timeout(20)]


def test_every_public_name_is_exported_and_resolves():
    import mpinb

    assert sorted(mpinb.__all__) == sorted(mpinb._EXPORTS)
    for name in mpinb.__all__:
        assert getattr(mpinb, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'Poool'"):
        mpinb.Poool  # noqa: B018


# The public classes users make themselves; the others (RunResult, Trace, CheckResult...) come back
# from mpinb's calls, and their docstrings describe them as attributes rather than parameters.
CONSTRUCTED = {"Pool"}


def _public_callables() -> list[tuple[str, object]]:
    """Every public function of ``mpinb``, and every public method of its public classes."""
    import inspect

    import mpinb

    found = []
    for name in mpinb.__all__:
        value = getattr(mpinb, name)
        if inspect.isfunction(value):
            found.append((name, value))
        elif inspect.isclass(value) and not issubclass(value, BaseException):
            if name in CONSTRUCTED:
                found.append((name, value))
            found += [(f"{name}.{attr}", method) for attr, method in vars(value).items()
                      if not attr.startswith("_") and inspect.isfunction(method)]
    return found


def test_the_api_pages_give_each_parameter_a_line():
    """Each parameter of the public API has its ``:param name:`` line (the API pages' parameter
    sections, with the types autodoc adds), or is named in another's (``run_file``'s are ``run``'s)."""
    import inspect
    import re

    undescribed = []
    for name, function in _public_callables():
        doc = inspect.getdoc(function) or ""
        fields = "\n".join(re.findall(r"^:param .*(?:\n    .*)*", doc, re.MULTILINE))
        parameters = [parameter for parameter in inspect.signature(function).parameters.values()
                      if parameter.name != "self" and parameter.kind not in (parameter.VAR_POSITIONAL,
                                                                             parameter.VAR_KEYWORD)]
        undescribed += [f"{name}({parameter.name})" for parameter in parameters
                        if f":param {parameter.name}:" not in fields and f"``{parameter.name}``" not in fields]
    assert len(_public_callables()) > 30, "the walk over the API found too little to judge"
    assert not undescribed, f"parameters the API pages do not describe: {undescribed}"
