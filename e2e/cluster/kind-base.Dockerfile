# kind's base image (sigs.k8s.io/kind images/base), rebuilt on the locally made Debian base.
# kind's own Dockerfile cannot build here: it starts FROM debian:trixie-slim (no registry),
# uses COPY --chmod (BuildKit only; dockerd from Debian has the legacy builder) and clones
# containerd, runc, crictl and the CNI plugins from GitHub to build them. This one takes
# kind's files (the context's files/, copied from the kind module by e2e/cluster/node.sh)
# and Debian's packages of the same programs: systemd, containerd 1.6, runc and the CNI
# plugins. What differs from kind's image is marked below.
ARG BASE=kgroups/debian:bookworm
FROM ${BASE}
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
       systemd conntrack iptables nftables iproute2 ethtool util-linux mount kmod \
       libseccomp2 pigz bash ca-certificates curl jq procps \
       containerd runc containernetworking-plugins \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \
    && find /lib/systemd/system/sysinit.target.wants/ -name "systemd-tmpfiles-setup.service" -delete \
    && rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \
       /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \
       /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/* \
    && echo "ReadKMsg=no" >> /etc/systemd/journald.conf \
    && ln -sf /usr/lib/systemd/systemd /sbin/init
# kind's files after the packages, so that its containerd config replaces Debian's.
COPY files/ /
RUN chmod 0755 /kind /kind/bin /kind/bin/* /usr/local/bin/* && chmod -R u+w,go-w /etc /kind
# Differences from kind's image:
#  * Debian installs containerd in /usr/bin, kind's unit starts /usr/local/bin/containerd;
#  * Debian's CNI plugins live in /usr/lib/cni, containerd looks in /opt/cni/bin;
#  * root here may lack CAP_SYS_RESOURCE, and a negative oom_score_adj then fails every pod
#    sandbox: containerd's CRI keeps scores at or above its own (restrict_oom_score_adj);
#  * no kindnetd image can be had, so one static ptp network serves the (single) node.
RUN sed -i 's|/usr/local/bin/containerd|/usr/bin/containerd|' /etc/systemd/system/containerd.service \
    && mkdir -p /opt/cni/bin && ln -s /usr/lib/cni/* /opt/cni/bin/ \
    && sed -i 's/^\([[:space:]]*restrict_oom_score_adj\) = false/\1 = true/' /etc/containerd/config.toml \
    && grep -q '^[[:space:]]*restrict_oom_score_adj = true' /etc/containerd/config.toml \
    && ctr oci spec \
       | jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
       | jq 'del(.process.rlimits)' > /etc/containerd/cri-base.json \
    && systemctl enable kubelet.service containerd.service undo-mount-hacks.service \
    && systemctl mask systemd-binfmt.service \
    && mkdir -p /etc/kubernetes/manifests /etc/cni/net.d
COPY 10-ptp.conflist /etc/cni/net.d/10-ptp.conflist
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]
