"""Sortable, searchable, filterable tables on the report's pages, by list.js.

list.js 2.3.1 (MIT; https://listjs.com, from the npm registry) is vendored as ``static/list.min.js``
with its licence in ``static/list.js.LICENSE``; ``static/tables.js`` wires every table that has a
``<thead>`` and two or more body rows (the episode index: one or more) to it: a click on a column header sorts by that column, a
search box keeps the rows holding every word typed, and a score filter keeps the rows whose value
in a chosen numeric column lies in [from, to] (the episode index adds its status and error-kind
selects). Both files are inlined into each page that has such a table (:func:`script`), so a page
works on its own: from a folder, an ``s3://`` mirror or a single downloaded file, with no network.
Without JavaScript the tables are plain tables and no control shows.

To update list.js: ``npm pack list.js@VERSION`` in a scratch folder, copy ``package/dist/list.min.js``
and ``package/LICENSE`` here, and change :data:`VERSION` and :data:`SHA256`.
"""

from __future__ import annotations

import functools
import hashlib
import re
from importlib import resources

VERSION = "2.3.1"
# sha256 of static/list.min.js as published on npm (list.js-2.3.1.tgz, integrity
# sha512-jnmm7DYpKtH3DxtO1E2VNCC9Gp7Wrp/FWA2JxQrZUhVJ2RCQBd57pCN6W5w6jpsfWZV0PCAbTX2NOPgyFeeZZg==)
SHA256 = "34456f18d306a85bece9a7462d98e6e6c2e072e5fdac64e0d70946b40d5feccf"

# The look of the controls and of a sortable header (the arrow of the column sorted by).
CSS = """.dl-tools{margin:.4em 0 .2em;font-size:.86em}.dl-tools input,.dl-tools select{font-size:1em}
.dl-tools .dl-q{margin-right:.6em}th.dl-sort{cursor:pointer;user-select:none}th.dl-sort:hover{background:#e6e6e6}
th.dl-sort.asc::after{content:" \\25B2";font-size:.75em}th.dl-sort.desc::after{content:" \\25BC";font-size:.75em}"""


def _static(name: str) -> str:
    return (resources.files("ray_jobs.outputs.report") / "static" / name).read_text(encoding="utf-8")


@functools.cache
def script() -> str:
    """The ``<script>`` element that makes a page's tables sortable, searchable and filterable:
    list.js (its licence in a comment) and ``tables.js``. It goes at the end of the body."""
    lib = _static("list.min.js")
    if hashlib.sha256(lib.encode()).hexdigest() != SHA256:
        raise RuntimeError(f"ray_jobs/outputs/report/static/list.min.js is not list.js {VERSION} as published "
                           f"(sha256 {SHA256}): restore it, or update VERSION and SHA256 with it")
    lib = re.sub(r"\n//# sourceMappingURL=\S+\s*$", "\n", lib)      # the map is not shipped
    notice = _static("list.js.LICENSE").replace("*/", "* /")
    glue = _static("tables.js")
    code = f"/*! list.js {VERSION} (https://listjs.com)\n\n{notice}*/\n{lib}\n{glue}"
    if re.search(r"</script|<!--", code, re.I):       # would end (or confuse) the inline element
        raise RuntimeError("the table script holds '</script' or '<!--' and cannot be inlined")
    return f"<script>\n{code}</script>"
