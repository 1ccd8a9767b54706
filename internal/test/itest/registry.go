//go:build integration

package itest

import (
	"context"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/registrydev"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// Registry is a CNCF registry 2.8 (Debian's docker-registry) on 127.0.0.1 that demands a
// password, run by internal/dev/devstack/registrydev (which the dev stack shares).
type Registry struct {
	Addr     string       // 127.0.0.1:PORT, the host part of every image reference
	User     string       // random per registry
	Password secret.Value // random per registry; Reveal() only where a credential is written

	srv *registrydev.Registry
}

// StartRegistry runs a registry for this test with htpasswd auth and storage in t.TempDir,
// checks that /v2/ answers 401 without credentials, and stops it when the test ends.
func StartRegistry(t testing.TB) *Registry {
	t.Helper()
	Require(t, PartRegistry)
	srv, err := registrydev.Start(context.Background(), registrydev.Options{Bin: registryBin, Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("itest: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Errorf("itest: %v", err)
		}
	})
	return &Registry{Addr: srv.Addr, User: srv.User, Password: srv.Password, srv: srv}
}

// Server is the registrydev registry behind r.
func (r *Registry) Server() *registrydev.Registry { return r.srv }

// DockerConfig returns a DOCKER_CONFIG directory (inside the test's temp dir) logged in to this
// registry with `docker login --password-stdin`: the password never reaches argv. The same
// directory is returned on every call.
func (r *Registry) DockerConfig(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := r.srv.DockerConfig(ctx)
	if err != nil {
		t.Fatalf("itest: %v", err)
	}
	return d
}
