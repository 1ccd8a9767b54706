// Package debtest tests what ships to a box: the monky-deployd .deb under the real dpkg in a
// throw-away chroot (fresh install, upgrades — including from the 0.1.8 package whose prerm
// disabled the timer — remove and purge), install.sh end to end, the ansible role, the systemd
// units and the release pipeline file.
//
// Tests that need root, dpkg, busybox-static, shellcheck, ansible or systemd-analyze carry the
// build tag `integration` (scripts/packaging-deps.sh installs the tools); in CI (CI set to anything
// but empty, false or 0) a missing tool fails them instead of skipping them.
package debtest
