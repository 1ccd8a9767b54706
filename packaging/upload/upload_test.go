package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

const (
	testVersion = "0.2.0"
	jobToken    = "glcbt-JOBTOKEN-s3cr3t"
	giteaToken  = "gitea-TOKEN-s3cr3t"
)

// makeDist writes what `make deb` leaves in dist/: the .deb, install.sh and SHA256SUMS.
func makeDist(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"monky-deployd_" + testVersion + "_amd64.deb":  "!<arch>\nstand-in deb\n",
		"monky-fleetctl_" + testVersion + "_amd64.deb": "!<arch>\nstand-in fleetctl deb\n",
		"install.sh": "#!/usr/bin/env bash\nDEFAULT_VERSION=\"" + testVersion + "\"\n",
	}
	var sums strings.Builder
	for _, n := range []string{"monky-deployd_" + testVersion + "_amd64.deb", "monky-fleetctl_" + testVersion + "_amd64.deb", "install.sh"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(files[n]), 0o644); err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256([]byte(files[n]))
		fmt.Fprintf(&sums, "%s  %s\n", hex.EncodeToString(h[:]), n)
	}
	if err := os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(sums.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// noNetwork fails any request: a dry run must not send one.
type noNetwork struct{ t *testing.T }

func (n noNetwork) RoundTrip(r *http.Request) (*http.Response, error) {
	n.t.Errorf("a request was sent: %s %s", r.Method, r.URL)
	return nil, errors.New("no network in this test")
}

func assertNoToken(t *testing.T, outputs ...string) {
	t.Helper()
	for _, o := range outputs {
		for _, tok := range []string{jobToken, giteaToken} {
			if strings.Contains(o, tok) {
				t.Errorf("a token leaked into the output:\n%s", o)
			}
		}
	}
}

type recorded struct {
	method, path, query string
	header              http.Header
	body                []byte
}

type recorder struct {
	mu   sync.Mutex
	reqs []recorded
}

func (r *recorder) add(req *http.Request) recorded {
	body, _ := io.ReadAll(req.Body)
	rec := recorded{req.Method, req.URL.EscapedPath(), req.URL.RawQuery, req.Header.Clone(), body}
	r.mu.Lock()
	r.reqs = append(r.reqs, rec)
	r.mu.Unlock()
	return rec
}

func TestGitLabPublish(t *testing.T) {
	dist := makeDist(t)
	rec := &recorder{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := rec.add(r)
		if r.Header.Get("JOB-TOKEN") != jobToken {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		switch {
		case r.Method == http.MethodPut && strings.HasPrefix(got.path, "/api/v4/projects/42/packages/generic/monky-deployd/0.2.0/"):
			w.WriteHeader(http.StatusCreated)
		case r.Method == http.MethodPost && got.path == "/api/v4/projects/42/releases":
			w.WriteHeader(http.StatusCreated)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"--target", "gitlab", "--dist", dist, "--version", testVersion},
		env(map[string]string{"CI_API_V4_URL": srv.URL + "/api/v4", "CI_PROJECT_ID": "42", "CI_JOB_TOKEN": jobToken, "CI_COMMIT_TAG": "v0.2.0"}),
		srv.Client(), &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errOut.String())
	}
	assertNoToken(t, out.String(), errOut.String())
	want := []string{
		"PUT /api/v4/projects/42/packages/generic/monky-deployd/0.2.0/monky-deployd_0.2.0_amd64.deb",
		"PUT /api/v4/projects/42/packages/generic/monky-deployd/0.2.0/monky-fleetctl_0.2.0_amd64.deb",
		"PUT /api/v4/projects/42/packages/generic/monky-deployd/0.2.0/install.sh",
		"PUT /api/v4/projects/42/packages/generic/monky-deployd/0.2.0/SHA256SUMS",
		"POST /api/v4/projects/42/releases",
	}
	if len(rec.reqs) != len(want) {
		t.Fatalf("%d requests, want %d: %+v", len(rec.reqs), len(want), rec.reqs)
	}
	for i, w := range want {
		if got := rec.reqs[i].method + " " + rec.reqs[i].path; got != w {
			t.Errorf("request %d: %s, want %s", i, got, w)
		}
	}
	deb, _ := os.ReadFile(filepath.Join(dist, "monky-deployd_0.2.0_amd64.deb"))
	if !bytes.Equal(rec.reqs[0].body, deb) {
		t.Error("the uploaded .deb differs from dist's")
	}
	var rel struct {
		TagName string `json:"tag_name"`
		Assets  struct {
			Links []struct{ Name, URL string } `json:"links"`
		} `json:"assets"`
	}
	if err := json.Unmarshal(rec.reqs[4].body, &rel); err != nil {
		t.Fatal(err)
	}
	if rel.TagName != "v0.2.0" || len(rel.Assets.Links) != 4 || !strings.HasSuffix(rel.Assets.Links[1].URL, "/0.2.0/monky-fleetctl_0.2.0_amd64.deb") ||
		!strings.HasSuffix(rel.Assets.Links[2].URL, "/0.2.0/install.sh") {
		t.Errorf("release body %s", rec.reqs[4].body)
	}
}

func TestGiteaPublishReplacesAssets(t *testing.T) {
	dist := makeDist(t)
	rec := &recorder{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := rec.add(r)
		if r.Header.Get("Authorization") != "token "+giteaToken {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		base := "/api/v1/repos/tikali/monky-deployd/releases"
		switch {
		case r.Method == http.MethodGet && got.path == base+"/tags/v0.2.0":
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"message":"Not Found"}`)
		case r.Method == http.MethodPost && got.path == base:
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, `{"id":7,"tag_name":"v0.2.0"}`)
		case r.Method == http.MethodGet && got.path == base+"/7/assets":
			fmt.Fprint(w, `[{"id":3,"name":"install.sh"},{"id":4,"name":"notes.txt"}]`)
		case r.Method == http.MethodDelete && got.path == base+"/7/assets/3":
			w.WriteHeader(http.StatusNoContent)
		case r.Method == http.MethodPost && got.path == base+"/7/assets":
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, `{"id":9}`)
		default:
			w.WriteHeader(http.StatusTeapot)
		}
	}))
	defer srv.Close()
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"--target", "gitea", "--dist", dist, "--version", testVersion},
		env(map[string]string{"GITEA_URL": srv.URL, "GITEA_TOKEN": giteaToken}), srv.Client(), &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errOut.String())
	}
	assertNoToken(t, out.String(), errOut.String())
	var seq []string
	for _, r := range rec.reqs {
		s := r.method + " " + r.path
		if r.query != "" {
			s += "?" + r.query
		}
		seq = append(seq, s)
	}
	base := "/api/v1/repos/tikali/monky-deployd/releases"
	want := []string{
		"GET " + base + "/tags/v0.2.0",
		"POST " + base,
		"GET " + base + "/7/assets",
		"POST " + base + "/7/assets?name=monky-deployd_0.2.0_amd64.deb",
		"POST " + base + "/7/assets?name=monky-fleetctl_0.2.0_amd64.deb",
		"DELETE " + base + "/7/assets/3",
		"POST " + base + "/7/assets?name=install.sh",
		"POST " + base + "/7/assets?name=SHA256SUMS",
	}
	if strings.Join(seq, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(seq, "\n"), strings.Join(want, "\n"))
	}
	if last := rec.reqs[len(rec.reqs)-1]; !bytes.Contains(last.body, []byte(`name="attachment"; filename="SHA256SUMS"`)) {
		t.Errorf("asset upload is not a multipart attachment: %q", last.body)
	}
}

func TestDryRunSendsNothing(t *testing.T) {
	for _, target := range []string{"gitlab", "gitea"} {
		t.Run(target, func(t *testing.T) {
			dist := makeDist(t)
			var out, errOut bytes.Buffer
			code := run(context.Background(), []string{"--target", target, "--dist", dist, "--version", testVersion, "--dry-run"},
				env(map[string]string{"CI_JOB_TOKEN": jobToken, "GITEA_TOKEN": giteaToken}),
				&http.Client{Transport: noNetwork{t}}, &out, &errOut)
			if code != 0 {
				t.Fatalf("exit %d\n%s%s", code, out.String(), errOut.String())
			}
			assertNoToken(t, out.String(), errOut.String())
			for _, want := range []string{"dry run", "install.sh", "SHA256SUMS", "monky-deployd_0.2.0_amd64.deb", "token set (not shown)"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("dry run output lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}

func TestRefusals(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		env      map[string]string
		mutate   func(dist string)
		wantCode int
		wantErr  string
	}{
		{"no target", []string{"--version", testVersion}, nil, nil, 2, "--target"},
		{"bad version", []string{"--target", "gitlab", "--version", "0.2"}, nil, nil, 2, "version"},
		{"tag does not match VERSION", []string{"--target", "gitlab", "--version", testVersion},
			map[string]string{"CI_COMMIT_TAG": "v0.1.9", "CI_JOB_TOKEN": jobToken}, nil, 2, "does not match"},
		{"no token", []string{"--target", "gitea", "--version", testVersion}, nil, nil, 2, "GITEA_TOKEN"},
		{"tampered deb", []string{"--target", "gitlab", "--version", testVersion, "--dry-run"}, nil,
			func(d string) {
				os.WriteFile(filepath.Join(d, "monky-deployd_0.2.0_amd64.deb"), []byte("other"), 0o644)
			}, 1, "does not match SHA256SUMS"},
		{"no SHA256SUMS", []string{"--target", "gitlab", "--version", testVersion, "--dry-run"}, nil,
			func(d string) { os.Remove(filepath.Join(d, "SHA256SUMS")) }, 1, "make deb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dist := makeDist(t)
			if tc.mutate != nil {
				tc.mutate(dist)
			}
			var out, errOut bytes.Buffer
			code := run(context.Background(), append(tc.args, "--dist", dist), env(tc.env), &http.Client{Transport: noNetwork{t}}, &out, &errOut)
			if code != tc.wantCode || !strings.Contains(errOut.String(), tc.wantErr) {
				t.Errorf("exit %d (want %d), stderr %q (want %q)", code, tc.wantCode, errOut.String(), tc.wantErr)
			}
			assertNoToken(t, out.String(), errOut.String())
		})
	}
}

// A server that echoes the credential in an error body must not get it into our output.
func TestErrorBodiesAreRedacted(t *testing.T) {
	dist := makeDist(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, "internal error for token %s", r.Header.Get("JOB-TOKEN"))
	}))
	defer srv.Close()
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"--target", "gitlab", "--dist", dist, "--version", testVersion},
		env(map[string]string{"CI_API_V4_URL": srv.URL, "CI_JOB_TOKEN": jobToken}), srv.Client(), &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "HTTP 500") || !strings.Contains(errOut.String(), "***") {
		t.Errorf("exit %d, stderr %q", code, errOut.String())
	}
	assertNoToken(t, out.String(), errOut.String())
}

func TestParseSums(t *testing.T) {
	h := strings.Repeat("a", 64)
	for _, tc := range []struct {
		name, in string
		ok       bool
	}{
		{"two files", h + "  a.deb\n" + h + " *install.sh\n", true},
		{"path", h + "  ../etc/passwd\n", false},
		{"dot name", h + "  ..\n", false},
		{"short hash", "abc  a.deb\n", false},
		{"duplicate", h + "  a\n" + h + "  a\n", false},
		{"empty", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseSums([]byte(tc.in))
			if (err == nil) != tc.ok {
				t.Errorf("parseSums(%q) error %v, want ok=%v", tc.in, err, tc.ok)
			}
		})
	}
}

func FuzzParseSums(f *testing.F) {
	h := strings.Repeat("0", 64)
	f.Add([]byte(h + "  monky-deployd_0.2.0_amd64.deb\n" + h + "  install.sh\n"))
	f.Add([]byte("garbage"))
	f.Add([]byte(h + "  a b\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		sums, err := parseSums(raw)
		if err != nil {
			return
		}
		for name, sum := range sums {
			if strings.ContainsAny(name, "/\\ \n") || name == "" || strings.HasPrefix(name, ".") || len(sum) != 64 {
				t.Fatalf("accepted entry %q %q", name, sum)
			}
		}
	})
}
