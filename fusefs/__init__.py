"""The filesystem view of an mqfs store: a path/inode model (`model`), a thin pyfuse3
adapter (`ops`), the mount lifecycle (`mount`, `umount`) and the `mqfs` command (`cli`)."""
