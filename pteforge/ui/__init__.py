"""What the command line shows and reads beside its parser (``cli.py``): the terminal's
rendering (``render``), options from a config file (``config``), the generated docs (``docs``)."""
