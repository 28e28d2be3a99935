#!/bin/sh
# Creates a development CA and a certificate for Envoy's TLS listener in ./certs:
# certs/ca.crt (give it to clients; the backends verify Envoy with it), certs/tls.crt and
# certs/tls.key (mounted into Envoy). The certificate names localhost (clients on this machine)
# and envoy (the backends, which call the gateway at https://envoy:8443/v1).
# Development only: the key is made world-readable so Envoy's unprivileged user can read it.
#
# Also writes ./.env with a random SWITCHYARD_INTERNAL_TOKEN (shared by extproc and the
# backends; see docker-compose.yaml) and the fleet layout's passwords and keys
# (compose.fleet.yaml), each unless .env already sets it.
set -eu
cd "$(dirname "$0")"
# secret VAR VALUE appends VAR=VALUE to .env unless .env sets VAR already.
secret() {
  if ! grep -qs "^$1=" .env; then
    if [ -s .env ] && [ -n "$(tail -c 1 .env)" ]; then echo >> .env; fi
    (umask 077 && echo "$1=$2" >> .env)
    echo "$1 in $(pwd)/.env"
  fi
}
secret SWITCHYARD_INTERNAL_TOKEN "$(openssl rand -hex 32)"
# The fleet layout's (compose.fleet.yaml): hex, so they need no quoting in a DSN.
secret SWITCHYARD_PG_PASSWORD "$(openssl rand -hex 24)"
secret SWITCHYARD_S3_ACCESS_KEY "$(openssl rand -hex 10)"
secret SWITCHYARD_S3_SECRET_KEY "$(openssl rand -hex 24)"
secret SWITCHYARD_REDIS_PASSWORD "$(openssl rand -hex 24)"
secret SWITCHYARD_DATA_KEY "$(openssl rand -base64 32)"
mkdir -p certs
cd certs
openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj "/CN=Switchyard dev CA" \
  -keyout ca.key -out ca.crt
openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout tls.key -out tls.csr
printf 'subjectAltName=DNS:localhost,DNS:envoy,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > tls.ext
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 -extfile tls.ext -out tls.crt
rm -f tls.csr tls.ext ca.srl
chmod 644 tls.key
echo "certificates in $(pwd)"
