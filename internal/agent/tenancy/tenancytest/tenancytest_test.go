package tenancytest

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/grant"
)

// staticVerifier maps tokens to env and jti; it is enough to test the fake on its own.
type staticVerifier map[string][2]string

func (v staticVerifier) Verify(_ context.Context, tok string) (string, string, error) {
	e, ok := v[tok]
	if !ok {
		return "", "", errors.New("unknown")
	}
	return e[0], e[1], nil
}

func TestBundleSha(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		// Reference values computed independently (Python hashlib) from PROTOCOL's formula.
		{"empty", map[string]string{}, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{"byte order, byte lengths", map[string]string{"b.txt": "hi\n", "a/c": "", "bundle.json": "{}", "é.txt": "ü"},
			"2fa804285b2c238cf8cc6e270720985e6d095ca7c4d61c4b74ccbc0e6158187a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := BundleSha(tc.files); got != tc.want {
				t.Fatalf("BundleSha = %s, want %s", got, tc.want)
			}
		})
	}
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func post(t *testing.T, url, tok string, body any) (*http.Response, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(string(b)))
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp, m
}

func TestLeaseWindowAndSupersede(t *testing.T) {
	signer, err := grant.NewSigner("t")
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Date(2026, 9, 7, 0, 0, 0, 0, time.UTC)}
	signer.Clock = clk.Now
	v := staticVerifier{"tok-a": {"env-a", "kit-0"}}
	s := Start(Options{Verifier: v, Signer: signer, Clock: clk.Now, LeaseLimit: 2, LeaseWindow: 10 * time.Minute})
	defer s.Close()
	s.AddEnv("env-a")

	var jtis []string
	for i := range 2 {
		resp, m := post(t, s.URL+"/v1/agent/lease", "tok-a", protocol.LeaseRequest{EnvID: "env-a", Reason: "apply"})
		if resp.StatusCode != 200 {
			t.Fatalf("lease %d: %d %v", i, resp.StatusCode, m)
		}
		c, err := grant.Verify(m["login_jwt"].(string), signer.PublicKey(), clk.Now())
		if err != nil || c.EnvID != "env-a" {
			t.Fatalf("grant: %+v %v", c, err)
		}
		jtis = append(jtis, c.ID)
		clk.Advance(3 * time.Minute)
	}
	resp, m := post(t, s.URL+"/v1/agent/lease", "tok-a", protocol.LeaseRequest{EnvID: "env-a"})
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "240" || m["code"] != protocol.CodeLeaseRateLimited {
		t.Fatalf("third lease: %d retry=%q %v", resp.StatusCode, resp.Header.Get("Retry-After"), m)
	}
	if got := s.LeasesGranted("env-a"); got != 2 {
		t.Fatalf("granted = %d", got)
	}

	// A token minted from a lease grant works until a kit re-reveal supersedes that grant.
	v["tok-lease"] = [2]string{"env-a", jtis[0]}
	if resp, _ := post(t, s.URL+"/v1/agent/checkin", "tok-lease", protocol.CheckinRequest{EnvID: "env-a"}); resp.StatusCode != 200 {
		t.Fatalf("checkin before re-reveal: %d", resp.StatusCode)
	}
	kit := s.RevealKit("env-a")
	kc, err := grant.Verify(kit, signer.PublicKey(), clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	if resp, m := post(t, s.URL+"/v1/agent/checkin", "tok-lease", protocol.CheckinRequest{EnvID: "env-a"}); resp.StatusCode != 401 || m["code"] != protocol.CodeUnauthenticated {
		t.Fatalf("checkin after re-reveal: %d %v", resp.StatusCode, m)
	}
	v["tok-kit"] = [2]string{"env-a", kc.ID}
	if resp, _ := post(t, s.URL+"/v1/agent/checkin", "tok-kit", protocol.CheckinRequest{EnvID: "env-a"}); resp.StatusCode != 200 {
		t.Fatalf("new kit token: %d", resp.StatusCode)
	}
	// A token from a grant the fake did not sign is fine until superseded by jti.
	if resp, _ := post(t, s.URL+"/v1/agent/checkin", "tok-a", protocol.CheckinRequest{EnvID: "env-a"}); resp.StatusCode != 200 {
		t.Fatalf("foreign grant: %d", resp.StatusCode)
	}
	s.SupersedeJTI("kit-0")
	if resp, _ := post(t, s.URL+"/v1/agent/checkin", "tok-a", protocol.CheckinRequest{EnvID: "env-a"}); resp.StatusCode != 401 {
		t.Fatalf("superseded by jti: %d", resp.StatusCode)
	}
}

func TestInjectionAndRecords(t *testing.T) {
	v := staticVerifier{"tok-a": {"env-a", "j"}, "tok-b": {"env-b", "j"}}
	s := Start(Options{Verifier: v})
	defer s.Close()
	s.AddEnv("env-a")
	s.AddEnv("env-b")

	s.FailNext(Checkin, 503, "", 2)
	for i, want := range []int{503, 503, 200} {
		if resp, _ := post(t, s.URL+"/v1/agent/checkin", "tok-a", protocol.CheckinRequest{EnvID: "env-a"}); resp.StatusCode != want {
			t.Fatalf("call %d: %d, want %d", i, resp.StatusCode, want)
		}
	}
	if resp, _ := post(t, s.URL+"/v1/agent/checkin", "", protocol.CheckinRequest{EnvID: "env-a"}); resp.StatusCode != 401 {
		t.Fatalf("no bearer: %d", resp.StatusCode)
	}
	if resp, _ := post(t, s.URL+"/v1/agent/checkin", "tok-b", protocol.CheckinRequest{EnvID: "env-a"}); resp.StatusCode != 403 {
		t.Fatalf("mismatch: %d", resp.StatusCode)
	}
	if resp, _ := post(t, s.URL+"/v1/agent/report", "tok-b", map[string]string{"env_id": "env-b"}); resp.StatusCode != 422 {
		t.Fatalf("report without result: %d", resp.StatusCode)
	}
	recs := s.Checkins("env-a")
	var got []int
	for _, r := range recs {
		got = append(got, r.Status)
	}
	if len(got) != 5 || got[0] != 503 || got[2] != 200 || got[3] != 401 || got[4] != 403 || recs[2].Response == nil || recs[0].Response != nil {
		t.Fatalf("records = %v", got)
	}
	if len(s.Checkins("")) != 5 || len(s.Reports("env-b")) != 1 {
		t.Fatal("filters")
	}
	if _, ok := s.LastReport("env-b"); ok {
		t.Fatal("a refused report counted as the last report")
	}

	// Close releases a stalled call rather than hanging the test.
	arrived, _ := s.Stall(Report)
	done := make(chan int, 1)
	go func() {
		resp, _ := post(t, s.URL+"/v1/agent/report", "tok-a", protocol.Report{EnvID: "env-a", Result: "healthy"})
		done <- resp.StatusCode
	}()
	<-arrived
	s.Close()
	if code := <-done; code != 200 {
		t.Fatalf("released report: %d", code)
	}
}
