"""objbtf's link step, as named passes over the per-object BTF.

``pipeline.LINK`` runs them in this order over one ``pipeline.LinkState``:

1. read (``concat``, ``objects``, ``rehash``): split the linked ``.BTF``
   into its per-object blobs and pair each with its ``.BTF.objbtf`` chunk
   (or hash the blob when the chunk is missing).  With ``--cache``, a link
   of objects whose types are those of the last link replays it here and
   goes straight to emit (``cache``).
2. merge (``merge``; in the compiled build its steps run in C,
   ``_merge.c``): one table of every object's types, merged by the
   chunks' hashes; types that cannot be merged by hash stay as they are.
   First, because every later pass is cheaper on the smaller table.
3. relocate (``relocate``): where each DATASEC entry's variable landed in
   the output, from ld's relocations or addresses.  Before datasec, which
   regroups entries by that output section.
4. datasec (``datasec``): one DATASEC per output section.
5. functions (``functions``): pahole's rules for FUNCs across objects,
   which drop some.  After datasec (it needs the final variables), before
   kfuncs, which must not tag a dropped function.
6. kfuncs (``kfuncs``): a ``bpf_kfunc`` DECL_TAG on every kfunc.
7. dedup (``objbtf.btf.dedup``): libbpf's ``btf__dedup`` on the result,
   last of the passes that change types, so that it sees them all; a
   module's link with ``--base-index`` dedups through the base's index
   (``base_index``, ``premap``).
8. distill (``distill``): with ``distilled_base``, a module's split BTF
   on a distilled base of its own (``.BTF.base``), which another build of
   the same kernel relocates onto its vmlinux.  After dedup, which decides
   which base types the module uses.
9. encode: the final bytes; ``--split-vars`` moves variables into split
   BTF (``split_vars``); ``--cache`` keeps the link for the next one.
10. layout: with the ``layout`` feature, the kind layout section that
    Linux 7.x reads (``objbtf.btf.writer.with_kind_layout``), in base BTF.
11. emit (``emit``): written where it was asked for, atomically (a
    module's ``.BTF.base`` in the same rewrite).
12. stamp (``stamp``): with ``--types-stamp``, a file rewritten only when
    the types modules depend on changed; Kbuild's modules depend on it.

Passes 2 to 6 remove types through ``tombstone`` so that ids do not move
before dedup; ``workers`` shares passes 1 and 2 among ``-j`` processes
(pass 2 only in the pure-Python build, whose scan of the hashes is slower),
and for vmlinux reads what pass 1 takes from the file beside the types
(``pipeline.Beside``: checksums, symbols, the cache's key) in a process of
its own while passes 1 and 2 go on.
"""

# objbtf decides whether the compiled modules (objbtf.COMPILED, three of
# them here) or their sources run; it must, before any module here loads.
import objbtf  # noqa: E402,F401
