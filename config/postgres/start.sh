#!/bin/sh
# paddleocr-fleet-postgres PORT LISTEN_ADDRESSES
# Makes the cluster on the first start (the data folder is empty), sets the role `fleet`'s
# password from the stack's password file on every start (a data folder kept from an earlier
# stack gets the current password), then runs PostgreSQL as the user postgres.
set -eu
port=${1:?port}
listen=${2:?listen addresses}
data=/var/lib/postgresql/data
password_file=/etc/paddleocr-fleet/postgres.password
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }

test -s "$password_file" || { echo "no password in $password_file" >&2; exit 1; }
chown postgres:postgres "$data" /run/postgresql
chmod 0700 "$data"
if [ ! -s "$data/PG_VERSION" ]; then
  as_postgres initdb -D "$data" -U postgres -E UTF8 --locale=C.UTF-8 \
    --auth-local=peer --auth-host=scram-sha-256
fi
# ours, rewritten on each start: local socket as the OS user postgres; TCP with a password only
cat > "$data/pg_hba.conf" <<HBA
local all postgres peer
host all fleet 0.0.0.0/0 scram-sha-256
host all fleet ::/0 scram-sha-256
HBA
chown postgres:postgres "$data/pg_hba.conf"
chmod 0600 "$data/pg_hba.conf"

# a private start on the socket alone: no client reaches it before the password is set
as_postgres pg_ctl -D "$data" -w -o "-c listen_addresses='' -p $port" -l /dev/null start >/dev/null
{
  printf "SELECT 'CREATE ROLE fleet LOGIN' WHERE NOT EXISTS "
  printf "(SELECT FROM pg_roles WHERE rolname = 'fleet')\\\\gexec\n"
  printf "SELECT 'CREATE DATABASE fleet OWNER fleet' WHERE NOT EXISTS "
  printf "(SELECT FROM pg_database WHERE datname = 'fleet')\\\\gexec\n"
  printf "\\\\set pw \`cat %s\`\n" "$password_file"
  printf "ALTER ROLE fleet PASSWORD :'pw';\n"
} | as_postgres psql -X -q -v ON_ERROR_STOP=1 -p "$port" -d postgres >/dev/null
as_postgres pg_ctl -D "$data" -w -m fast stop >/dev/null

exec setpriv --reuid=postgres --regid=postgres --init-groups \
  postgres -D "$data" -p "$port" -c "listen_addresses=$listen" \
  -c password_encryption=scram-sha-256
