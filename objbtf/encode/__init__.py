"""The per-object encoder: one object's DWARF (or compiler BTF) to its
``.BTF``, ``.rela.BTF`` and ``.BTF.objbtf`` sections (``encoder``), an
object file encoded in place (``object_file``) and the encode cache
(``cache``)."""
