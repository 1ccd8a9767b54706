// Package boxtest runs the package on a real box: Debian with systemd as PID 1 in a container
// (scripts/build-box-image.sh), real dpkg, real timers, the unit's hardening as systemd applies
// it, and the agent deploying through the host's Docker engine against the dev stack
// (internal/dev/devstack) on the host's loopback.
//
// What it proves is what only systemd can: the timer fires on its own after install.sh and after
// a reboot, an upgrade from the 0.1.8 package whose prerm disabled the timer heals itself with
// nobody typing systemctl, an upgrade of ours leaves no gap in check-ins, remove and purge leave
// nothing enabled, the ansible role reaches the same end state. The faster chroot tests in
// packaging/debtest keep covering the maintainer scripts' branches one by one.
//
// The tests carry the build tag `integration`; in CI (CI set to anything but empty, false or 0)
// a missing part (docker, the box image, compose, OpenBao, the registry, ansible) fails them
// instead of skipping them. `make integration-setup` provides every part.
//
// The box stands in for two things a production box has and a container cannot: the tunneller
// (ziti-edge-tunnel's DNS intercept of monky.tenancy.deploy is an /etc/hosts line pointing at the
// dev stack on loopback, and its `enroll` is packaging/debtest's stand-in) and the timer's 60 s
// period (a drop-in shortens it, see timerDropIn; the unit itself is the shipped one). The box
// gets CAP_SYS_ADMIN and CAP_SYS_PTRACE, which systemd has on a host: the namespacing the units
// ask for (DynamicUser=, PrivateUsers=, ProtectProc=) is then set up for real, not refused at spawn.
package boxtest
