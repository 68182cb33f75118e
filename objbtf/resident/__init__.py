"""The resident server (``server``), its clients (``client`` in Python,
``client.c`` in C, built by ``native_client``) and the wire protocol and
socket naming they share (``protocol``)."""
