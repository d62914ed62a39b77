# The ddiloco image: one binary for every part (operator, syncer, learner,
# sidecar). Built by `make image` (scripts/image.sh), which assembles a
# rootfs under build/image/ (the binary, the shared libraries it links at
# the paths ldd gives, the dynamic loader, /etc/passwd, /etc/group,
# /etc/nsswitch.conf, /tmp, the fortunes the example jobs read) and packs
# it as build/image/context/rootfs.tar, owners set in the archive: root,
# but the non-root user's home and the mount points a pod uses (spec,
# exchange, checkpoints), so a container without a volume there can still
# write. FROM scratch is a reserved name: nothing is pulled.
FROM scratch
ARG VERSION=unknown
LABEL org.opencontainers.image.title="ddiloco" \
      org.opencontainers.image.version="${VERSION}"
# ADD unpacks a local archive and keeps the owners it records
ADD rootfs.tar /
# the pods' commands name `ddiloco`, found on PATH (a runtime sets none
# of its own for an image that has one)
ENV PATH=/usr/local/bin:/usr/bin:/bin
USER 65532:65532
WORKDIR /home/ddiloco
ENTRYPOINT ["/usr/local/bin/ddiloco"]
