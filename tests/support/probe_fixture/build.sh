#!/bin/sh
# Builds the probe's level-1 fixture inside python_image: copies the stand-in packages into
# site-packages and compiles the extensions listed in exts.txt ("<name> <gcc flags...>").
set -eu
SITE=$(python3 -c 'import site; print(site.getsitepackages()[0])')
INC=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
mkdir -p "$SITE"
cp -r /fixture/site/. "$SITE/"
gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o /fixture/libcuda.so.1 /fixture/libcuda_stub.c
while read -r name flags; do
    [ -n "$name" ] || continue
    # shellcheck disable=SC2086
    mkdir -p "$(dirname "$SITE/vllm/$name")"
    gcc -shared -fPIC -O0 -I"$INC" -DNAME="$(basename "$name")" -o "$SITE/vllm/$name.abi3.so" \
        /fixture/ext.c $flags
done < /fixture/exts.txt
mkdir -p /opt/edgevllm
if [ -f /fixture/mods.json ]; then cp /fixture/mods.json /opt/edgevllm/mods.json; fi
if [ -f /fixture/lock.json ]; then cp /fixture/lock.json /opt/edgevllm/edgevllm.lock.json; fi
rm -rf /fixture
