"""Sphinx configuration: the user guide (docs/guide/), the Python API from docstrings, and the
tutorials in English and Chinese, executed at build time so that every plot, space-time diagram
and result is on the page. Built offline: every asset is served from the site itself.

The source directory is the repository's root (``sphinx-build -c docs . build/docs``), so that the
front page includes the README and the tutorials are the notebooks themselves, not copies.
"""

from __future__ import annotations

import functools
import os

import jupyter_cache.executors.utils as _notebook_execution  # (not `jupyter_cache`: a MyST-NB setting's name)
import nbclient

import mpinb

project = "mpinb"
author = "the mpinb developers"
release = version = mpinb.__version__
copyright = "mpinb developers"

root_doc = "docs/index"
include_patterns = ["docs/**", "CONTRIBUTING.md", "notebooks/*.ipynb", "notebooks/zh/*.ipynb", "notebooks/zh/*.md"]
exclude_patterns = ["build", ".venv*", "docs/_build"]

extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.viewcode"]
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3
suppress_warnings = ["myst.header", "misc.highlighting_failure"]

# Tutorials run when the site is built: what a reader sees is what this build computed.
nb_execution_mode = os.environ.get("MPINB_DOCS_EXECUTE", "force")
nb_execution_raise_on_error = True  # a cell that fails unexpectedly fails the build
nb_execution_show_tb = True
# A tutorial's cell takes seconds. One still running after the timeout is interrupted, not
# abandoned: mpinb then ends the run with its own account (who waits where, every rank's stack),
# which the build's error shows, where a plain timeout would say only that the cell took too long.
# MyST-NB hands nbclient no options of its own, so the function it calls is given this one.
nb_execution_timeout = 300
_notebook_execution.executenb = functools.partial(nbclient.execute, interrupt_on_timeout=True)
# Widgets need their JavaScript; the page shows each view's static form instead (mpinb's views
# carry an SVG and a text summary next to the widget), and nothing is fetched from a CDN.
nb_mime_priority_overrides = [("html", "application/vnd.jupyter.widget-view+json", None)]
nb_ipywidgets_js = {}

html_theme = "furo"
html_title = f"mpinb {version}"
html_static_path: list[str] = []
html_extra_path = ["_root"]  # build/docs/index.html leads to the guide
html_theme_options = {"navigation_with_keys": True}
html_show_sourcelink = False

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False}
