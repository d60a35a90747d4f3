"""What a widget leaves in a notebook where widgets cannot be drawn (nbclient, nbconvert, GitHub)."""

from __future__ import annotations


class StaticFallback:
    """Mixin for widgets: add ``text/plain`` and ``text/html`` from ``_fallback()`` to the bundle."""

    def _fallback(self) -> tuple[str, str]:
        raise NotImplementedError

    def _repr_mimebundle_(self, **kwargs: object) -> tuple[dict, dict]:
        bundle = super()._repr_mimebundle_(**kwargs)  # type: ignore[misc]  # the widget's, after us in the MRO
        data, metadata = bundle if isinstance(bundle, tuple) else (bundle or {}, {})
        data = dict(data)
        data["text/plain"], data["text/html"] = self._fallback()
        return data, metadata
