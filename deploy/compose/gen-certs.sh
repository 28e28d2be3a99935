#!/bin/sh
# Creates a development CA and a certificate for Envoy's TLS listener in ./certs:
# certs/ca.crt (give it to clients), certs/tls.crt and certs/tls.key (mounted into Envoy).
# Development only: the key is made world-readable so Envoy's unprivileged user can read it.
set -eu
cd "$(dirname "$0")"
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
