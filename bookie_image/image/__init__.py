"""The container image: built from scratch (no registry), one image for every role.

`build` runs on the host (debootstrap → docker import → Dockerfile with a wheelhouse);
`supervisor` is PID 1 inside every container. Neither imports the harness.
"""
