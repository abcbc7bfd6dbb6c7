# Adds the labels that are only known after the image is built and checked (mods outcomes,
# arch-verify verdict, probe result). Config-only: no layer is added.
ARG IMAGE
FROM ${IMAGE}
