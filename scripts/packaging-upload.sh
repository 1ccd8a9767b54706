#!/usr/bin/env bash
# Publishes what `make deb` left in dist/ (both .debs, install.sh, SHA256SUMS).
#   scripts/packaging-upload.sh --target gitlab [--dry-run]   # generic package registry + release
#   scripts/packaging-upload.sh --target gitea  [--dry-run]   # the Gitea mirror's release
# GitLab: CI_JOB_TOKEN in CI, or GITLAB_TOKEN (api scope) by hand; CI_API_V4_URL and
# CI_PROJECT_ID default to scm.tikali.ai and this project. Gitea: GITEA_TOKEN, and GITEA_URL /
# GITEA_REPO when not the defaults. In a tag pipeline CI_COMMIT_TAG must be v<VERSION>.
# Tokens are read from the environment only: never put one on this command line.
set -euo pipefail
cd "$(dirname "$0")/.."
# packaging/ is a module of its own: build the tool there, run it here (its -dist and
# -version-file defaults are relative to the repository root).
tools=$(mktemp -d)
trap 'rm -rf "$tools"' EXIT
go -C packaging build -o "$tools/upload" ./upload
"$tools/upload" "$@"
