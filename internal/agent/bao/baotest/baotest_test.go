package baotest

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"
)

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

func TestVerify(t *testing.T) {
	clk := &clock{t: time.Date(2026, 9, 7, 0, 0, 0, 0, time.UTC)}
	s := New(Options{Clock: clk.Now, TokenTTL: time.Hour})
	live := s.IssueToken("env-a", "jti-1")
	revoked := s.IssueToken("env-a", "jti-2")
	s.Revoke(revoked)
	short := s.IssueToken("env-b", "jti-3")
	s.SetTTL(short, time.Minute)
	clk.Advance(2 * time.Minute)

	for _, tc := range []struct {
		name, tok, env, jti string
		ok                  bool
	}{
		{"live", live, "env-a", "jti-1", true},
		{"revoked", revoked, "", "", false},
		{"expired", short, "", "", false},
		{"unknown", "s.nope", "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, jti, err := s.Verify(context.Background(), tc.tok)
			if (err == nil) != tc.ok || env != tc.env || jti != tc.jti {
				t.Fatalf("Verify = %q %q %v", env, jti, err)
			}
		})
	}
}

func TestRenew(t *testing.T) {
	clk := &clock{t: time.Date(2026, 9, 7, 0, 0, 0, 0, time.UTC)}
	s := Start(Options{Clock: clk.Now, TokenTTL: time.Hour, MaxTTL: 90 * time.Minute})
	defer s.Close()
	renew := func(tok string) int {
		req, _ := http.NewRequest(http.MethodPut, s.URL+"/v1/auth/token/renew-self", nil)
		req.Header.Set("X-Vault-Token", tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	tok := s.IssueToken("env-a", "j")
	fixed := s.IssueToken("env-a", "k")
	s.SetRenewable(fixed, false)
	clk.Advance(45 * time.Minute)
	if code := renew(tok); code != 200 {
		t.Fatalf("renew: %d", code)
	}
	if code := renew(fixed); code != 400 {
		t.Fatalf("renew of a non-renewable token: %d", code)
	}
	clk.Advance(50 * time.Minute) // past the max TTL of 90 min from creation
	if code := renew(tok); code != 403 {
		t.Fatalf("renew after max TTL: %d", code)
	}
	if s.Renews() != 1 {
		t.Fatalf("renews = %d", s.Renews())
	}
}

func TestFailNextPaths(t *testing.T) {
	s := Start(Options{})
	defer s.Close()
	tok := s.IssueToken("env-a", "j")
	s.FailNext("auth/token/lookup-self", 500, 1)
	get := func() int {
		req, _ := http.NewRequest(http.MethodGet, s.URL+"/v1/auth/token/lookup-self", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if a, b := get(), get(); a != 500 || b != 200 {
		t.Fatalf("statuses %d, %d", a, b)
	}
	if s.Lookups() != 1 {
		t.Fatalf("lookups = %d", s.Lookups())
	}
}
