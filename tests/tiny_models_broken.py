"""A module that raises when imported (not an ImportError): the fork server's imports of
what backends name (``pteforge.run.fork_server_also``) must survive it."""

raise RuntimeError("this module cannot be imported")
