# Flotilla's container image: the static binary alone, FROM scratch.
# Build it with `make image` (which first builds dist/flotilla-linux-$ARCH);
# see docs/operations.md for running it.
#
# There is no shell or libc in the image: units run by the exec driver must
# be static programs from a mounted volume, so the image suits daemons
# without an agent (--no-agent: engine and API), `--driver sim`, and the
# CLI. Machines that run ordinary units run the binary under systemd
# (contrib/systemd/flotilla.service).
FROM scratch
ARG TARGETARCH=amd64
COPY LICENSE /LICENSE
COPY dist/flotilla-linux-${TARGETARCH} /usr/local/bin/flotilla
# The daemon's defaults in the container: every flag can be overridden with
# another FLOTILLA_<FLAG> variable (docker run -e) or on the command line.
ENV FLOTILLA_DATA_DIR=/var/lib/flotilla \
    FLOTILLA_API_ADDR=0.0.0.0:7480
VOLUME /var/lib/flotilla
EXPOSE 7480
ENTRYPOINT ["/usr/local/bin/flotilla"]
CMD ["daemon", "--etcd-embed"]
