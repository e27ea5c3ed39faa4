"""What the caller sends: where a document comes from, and the checks it must pass.

:mod:`~gateway.inputs.sources` reads a document from base64, a data URL, a local path or a URL
(fetched through :mod:`gateway.wire.urlguard`); :mod:`~gateway.inputs.document` is a checked
document (type, size, pixel and page bounds) and the inspector that reads PDFs and cuts page
slices in killable worker processes (:mod:`~gateway.inputs.workers`, running
:mod:`~gateway.inputs.pdf` with PDFium); :mod:`~gateway.inputs.decodable` finds damaged
images from their structure. A bad input raises :class:`gateway.errors.InputError`.
"""
