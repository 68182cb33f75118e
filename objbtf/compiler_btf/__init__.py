"""Loading the BTF a compiler wrote into an object (GCC's ``-gbtf``)."""
