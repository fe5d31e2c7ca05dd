"""The odradek command: server and admin subcommands."""
