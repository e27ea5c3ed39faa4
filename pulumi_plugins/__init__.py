"""Pulumi plugins of our own, for machines where the official ones cannot be installed.

The Pulumi CLI and engine are built from Go modules (`scripts/install-pulumi.sh`). The Python
language host and the `docker` and `command` resource providers are not served by the Go module
proxy this project can reach, so these modules implement the parts of their gRPC protocols and
schemas that the fleet program uses, against the real Docker engine and the real shell. Where an
operator has the official plugins (installed the official way), those are used instead.
"""
