# Sourced by scripts/up.sh and scripts/down.sh: the project's venv, the Pulumi toolchain first on
# PATH (scripts/install-pulumi.sh) and the file state backend in .pulumi-state/ (unless
# PULUMI_BACKEND_URL is set; PULUMI_CONFIG_PASSPHRASE defaults to empty). Sets $pulumi_bin.
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# pip's and setuptools' notes (an editable install) only when the install fails
if ! pip_said="$(.venv/bin/python -m pip install -q --disable-pip-version-check -e . 2>&1)"; then
  echo "$pip_said" >&2
  echo "pulumi-env: pip install -e . failed (above)" >&2
  exit 1
fi

pulumi_bin="$(bash scripts/install-pulumi.sh)"
export PATH="$pulumi_bin:$PATH"
export PULUMI_SKIP_UPDATE_CHECK=true
# metadata=skip: no metadata file beside each state file (written in place, not renamed into
# place: a CLI killed while writing it leaves it empty, and every later command fails with EOF)
export PULUMI_BACKEND_URL="${PULUMI_BACKEND_URL:-file://$PWD/.pulumi-state?metadata=skip}"
export PULUMI_CONFIG_PASSPHRASE="${PULUMI_CONFIG_PASSPHRASE-}"
mkdir -p .pulumi-state
