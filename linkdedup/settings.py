"""A link's settings: ``objbtf link``'s options, as one value.

The command line builds one ``LinkSettings`` (``objbtf.cli.commands``) and
hands it to ``pipeline.link``; the passes read it from
``LinkState.settings``.  Its fields are named as the command-line table
names the options' values (``objbtf.cli.options``).
"""
from __future__ import annotations

from dataclasses import dataclass

from objbtf.features import Features


@dataclass(frozen=True)
class LinkSettings:
    """What one link was asked to do; see ``objbtf link --help`` for each option."""
    #: The linked file (vmlinux, or a module with ``base_path``).
    file: str
    features: Features
    #: --base: the base BTF of a module link.
    base_path: str | None = None
    #: --output: where the BTF goes instead of into ``file``.
    output: str | None = None
    #: --input-section: the section of ``file`` with the per-object BTF.
    input_section: str = '.BTF'
    #: --split-vars: the variables outside .data..percpu go to this file.
    split_vars: str | None = None
    #: --cache: the file that keeps this link for the next one (``cache``).
    cache: str | None = None
    #: --types-stamp: a file changed only when the types do (``stamp``).
    types_stamp: str | None = None
    #: --base-index: the index of the base's BTF (``base_index``).
    base_index: str | None = None
    #: --objects: the list of the objects that went into ``file`` (``objects``).
    objects_path: str | None = None
    #: --allow-missing: warn about listed objects without BTF.
    allow_missing: bool = False
    #: -j: processes sharing the work (``workers``); None: the CPUs this
    #: process may use.
    jobs: int | None = None
    #: -q: no summary and no progress.
    quiet: bool = False
