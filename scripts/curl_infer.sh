#!/usr/bin/env bash
# Classify one image with curl alone: the raw KServe v2 HTTP protocol with Triton's
# binary tensor data extension (what tritonclient.http does under the hood).
#
#   scripts/curl_infer.sh IMAGE [HOST:PORT]        (HOST:PORT defaults to $HOST, then localhost:8000)
#
# The request body is a JSON header followed by the raw tensor data:
#   {"inputs":[{"name":"IMAGE","shape":[1,1],"datatype":"BYTES",
#               "parameters":{"binary_data_size":4+filesize}}], "outputs":[...]}
#   <file size as 4-byte little-endian uint32><file bytes>
# A BYTES tensor element is always sent as its length followed by its bytes.
# Header "Inference-Header-Content-Length" tells the server where the JSON ends.
# Outputs are asked for with "binary_data":false, so the whole response is JSON.
set -euo pipefail

image="${1:?usage: $0 IMAGE [HOST:PORT]}"
host="${2:-${HOST:-localhost:8000}}"
size=$(stat -c %s "$image")            # GNU stat; on macOS: stat -f %z

header='{"inputs":[{"name":"IMAGE","shape":[1,1],"datatype":"BYTES","parameters":{"binary_data_size":'$((4 + size))'}}],'
header+='"outputs":[{"name":"LABELS","parameters":{"binary_data":false}},{"name":"SCORES","parameters":{"binary_data":false}}]}'

# The 4-byte little-endian length prefix of the one BYTES element, written byte by byte.
length_prefix() {
  printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' \
    $(($1 & 255)) $(($1 >> 8 & 255)) $(($1 >> 16 & 255)) $(($1 >> 24 & 255)))"
}

{ printf '%s' "$header"; length_prefix "$size"; cat "$image"; } |
  curl --silent --show-error --fail-with-body --write-out '\n' \
    -H "Inference-Header-Content-Length: ${#header}" \
    -H "Content-Type: application/octet-stream" \
    --data-binary @- \
    "http://$host/v2/models/image_classifier/infer"
