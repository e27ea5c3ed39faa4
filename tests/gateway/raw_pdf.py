"""PDFs written by hand, object by object, for the tests that build broken or hostile ones:
a library would refuse to write (or would repair) what these tests need to send."""

from __future__ import annotations

import io

HEADER = b"%PDF-1.7\n"
BINARY_MARKER = b"%\xe2\xe3\xcf\xd3\n"
"""The comment line that tells readers the file holds binary data (as scanners write it)."""


def pdf_from_objects(objects: list[bytes], *, header: bytes = HEADER) -> bytes:
    """A PDF of ``objects`` (object ``n`` is ``objects[n - 1]``, the catalog is object 1) with
    a classic cross-reference table and trailer, so that each part can be broken on its own."""
    out = io.BytesIO()
    out.write(header)
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\n" % (len(objects) + 1))
    out.write(b"startxref\n%d\n%%%%EOF\n" % xref)
    return out.getvalue()
