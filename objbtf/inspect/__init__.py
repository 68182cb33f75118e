"""Looking at BTF beside a build: two BTFs compared by name (``diff``) and
BTF loaded into the running kernel for its verdict (``kernel_load``)."""
