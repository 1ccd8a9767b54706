package bundle

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bundle/bundletest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

const (
	rel     = "/var/lib/monky-deployd/env-qa-02/releases/7a10"
	project = "monky-env-qa-02"
)

func svc(body string) string { return bundletest.Svc(body) }

// composeBundle is the smallest bundle around one compose file.
func composeBundle(file, compose string, allow bool, template string) *Bundle {
	if file == "" {
		file = DefaultComposeFile
	}
	b := &Bundle{
		Files:       map[string]string{file: compose},
		Meta:        Meta{ComposeFile: file, Agent: Agent{AllowPrivileged: allow}},
		EnvTemplate: template,
	}
	if template != "" {
		b.Entries = []Entry{{Var: "DB_PASSWORD", Path: "s", Key: DefaultKey, Use: UseEnv}}
	}
	return b
}

func TestJudgeRefusesEveryBypassClass(t *testing.T) {
	for _, c := range bundletest.BypassClasses() {
		t.Run(c.Name, func(t *testing.T) {
			b := composeBundle(c.File, c.Compose, false, c.Template)
			assertRefusal(t, b.Check(rel, project, Host{}), c.Code, c.Want)
		})
	}
}

func TestJudgeAllowPrivileged(t *testing.T) {
	for _, c := range bundletest.BypassClasses() {
		t.Run(c.Name, func(t *testing.T) {
			err := composeBundle(c.File, c.Compose, true, c.Template).Check(rel, project, Host{})
			if c.Code == protocol.CodePrivileged {
				if err != nil {
					t.Fatalf("allow_privileged: %v", err)
				}
				return
			}
			assertRefusal(t, err, c.Code, c.Want) // never allowed, whatever the flag
		})
	}
}

// TestWritableBindOfReleaseRootIsRefused is review 8's finding 1: a container that can write
// the release's own files rewrites what a revert runs again.
func TestWritableBindOfReleaseRootIsRefused(t *testing.T) {
	for _, src := range []string{".", "./"} {
		err := composeBundle("", svc("    volumes:\n      - "+src+":/rel\n"), false, "").Check(rel, project, Host{})
		if err == nil {
			t.Fatalf("%s:/rel (writable) accepted", src)
		}
		assertRefusal(t, err, protocol.CodePrivileged, "api: volumes[0]: writable bind of the release directory")
	}
}

// TestJudgeAcceptsHarmlessNeighbours: the allow-list's edges that stay allowed.
func TestJudgeAcceptsHarmlessNeighbours(t *testing.T) {
	cases := []struct{ name, body string }{
		{"the release bound read-only", "    volumes: [\".:/rel:ro\"]\n"},
		{"a bundle file's directory bound read-only", "    volumes: [\"./conf:/etc/app:ro\"]\n"},
		{"a writable data directory holding no bundle file", "    volumes: [\"./data:/data\"]\n"},
		{"json-file with rotation", "    logging: {driver: json-file, options: {max-size: 10m, max-file: \"3\", compress: \"true\", tag: \"{{.Name}}\"}}\n"},
		{"local and non-blocking", "    logging: {driver: local, options: {mode: non-blocking, max-buffer-size: 4m}}\n"},
		{"no logs", "    logging: {driver: none}\n"},
		{"options without a driver", "    logging: {options: {max-size: 1m}}\n"},
		{"oom_score_adj above 0", "    oom_score_adj: 500\n"},
		{"oom_kill_disable false", "    oom_kill_disable: false\n"},
		{"ulimits and shm_size", "    ulimits: {nofile: 65536, memlock: -1}\n    shm_size: 1g\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := composeBundle("", svc(c.body), false, "")
			b.Files["conf/app.yml"] = "a: 1\n"
			if err := b.Check(rel, project, Host{}); err != nil {
				t.Fatalf("refused: %v", err)
			}
		})
	}
	b := composeBundle("", svc("    volumes: [\"./conf:/etc/app\"]\n"), false, "")
	b.Files["conf/app.yml"] = "a: 1\n"
	assertRefusal(t, b.Check(rel, project, Host{}), protocol.CodePrivileged, "api: volumes[0]: writable bind holding the release's own conf/app.yml")
}

// The host's time zone files may be bound read-only, no more, and only where they are files: a
// missing one docker would create as a directory in the host's /etc.
func TestJudgeTimezoneBinds(t *testing.T) {
	files := map[string]bool{"/etc/localtime": true}
	host := Host{IsFile: func(p string) bool { return files[p] }}
	for _, v := range []string{`"/etc/localtime:/etc/localtime:ro"`, `"/etc/localtime:/x/tz:ro"`, "{type: bind, source: /etc/localtime, target: /etc/localtime, read_only: true}"} {
		if err := composeBundle("", svc("    volumes: ["+v+"]\n"), false, "").Check(rel, project, host); err != nil {
			t.Errorf("%s refused: %v", v, err)
		}
	}
	err := composeBundle("", svc("    volumes: [\"/etc/timezone:/etc/timezone:ro\"]\n"), false, "").Check(rel, project, host)
	assertRefusal(t, err, protocol.CodePrivileged, "api: volumes[0]: not a file on this host: docker would create a directory in the host's /etc for it")
}

// A network's address management: the default driver, and addresses the host need not keep. The
// intercept range is the config's: a tunneller moved to another range moves the refusal with it.
func TestJudgeIPAM(t *testing.T) {
	network := func(ipam string) *Bundle {
		return composeBundle("", svc("    networks: [lan]\n")+"networks:\n  lan:\n    ipam:\n"+ipam, false, "")
	}
	for _, ipam := range []string{
		"      driver: default\n",
		"      config: [{subnet: 10.20.0.0/16, ip_range: 10.20.1.0/24, gateway: 10.20.1.1, aux_addresses: {a: 10.20.0.5}}]\n",
		"      config: [{subnet: 100.128.0.0/16}, {subnet: 100.63.255.0/24}]\n", // either side of 100.64.0.0/10
		"      config: [{subnet: \"fd12:3456:789a::/64\"}, {subnet: \"2001:db8::/64\"}]\n",
	} {
		if err := network(ipam).Check(rel, project, Host{}); err != nil {
			t.Errorf("%q refused: %v", ipam, err)
		}
	}
	moved := Host{InterceptRange: netip.MustParsePrefix("10.200.0.0/16")}
	if err := network("      config: [{subnet: 100.64.0.0/16}]\n").Check(rel, project, moved); err != nil {
		t.Errorf("with the tunneller on 10.200.0.0/16, 100.64.0.0/16 refused: %v", err)
	}
	assertRefusal(t, network("      config: [{subnet: 10.200.128.0/17}]\n").Check(rel, project, moved), protocol.CodePrivileged,
		"network lan: ipam.config[0].subnet: overlaps the tunneller's intercept range (10.200.0.0/16)")
	for _, bad := range []string{"      config: [{subnet: 10.20.0.0/16, gateway: 10.20.0.300}]\n", "      config: [{subnet: 10.20.0.0/16, aux_addresses: {a: host}}]\n"} {
		assertRefusal(t, network(bad).Check(rel, project, Host{}), protocol.CodeBundleInvalid, "network lan: ipam.config[0].")
	}
}

func TestJudgeAcceptsRealWorldFiles(t *testing.T) {
	bundletest.RealWorldFiles(t, "testdata/compose", func(t *testing.T, compose string) {
		b := composeBundle("", compose, false, "DB_PASSWORD=${DB_PASSWORD}\nMYSQL_ROOT_PASSWORD=${DB_PASSWORD}\nMINIO_ROOT_PASSWORD=${DB_PASSWORD}\nTAG=1.2\n")
		if err := b.Check(rel, project, Host{}); err != nil {
			t.Fatalf("refused: %v", err)
		}
	})
}

func TestJudgeDetails(t *testing.T) {
	t.Run("every finding listed, invalid before privileged", func(t *testing.T) {
		err := composeBundle("", svc("    privileged: true\n    build: .\n    env_file: /e\n"), false, "").Check(rel, project, Host{})
		assertRefusal(t, err, protocol.CodeBundleInvalid, "docker-compose.yml: 2 finding(s): api: build: the box builds nothing")
		if strings.Contains(err.Error(), "privileged") {
			t.Errorf("detail %q lists privileged findings with invalid ones", err)
		}
	})
	t.Run("many findings are cut at 4 KiB with a count", func(t *testing.T) {
		var b strings.Builder
		b.WriteString("services:\n")
		for i := range 2000 {
			fmt.Fprintf(&b, "  s%d: {image: x, privileged: true}\n", i)
		}
		err := composeBundle("", b.String(), false, "").Check(rel, project, Host{})
		assertRefusal(t, err, protocol.CodePrivileged, "2000 finding(s)")
		if len(err.Error()) > MaxFindingsDetail {
			t.Errorf("detail is %d bytes", len(err.Error()))
		}
		if !strings.Contains(err.Error(), " more") {
			t.Errorf("detail does not count what it left out: …%s", err.Error()[len(err.Error())-60:])
		}
	})
	t.Run("a file compose does not load names where", func(t *testing.T) {
		err := composeBundle("", svc("    volumes: [7]\n"), false, "").Check(rel, project, Host{})
		assertRefusal(t, err, protocol.CodeBundleInvalid, "docker-compose.yml does not load as compose loads it")
	})
	t.Run("post-render details name keys, never values", func(t *testing.T) {
		j := Judgement{Compose: []byte(svc("    volumes: [\"/etc/s3cr3t-path:/x\"]\n")), File: "dc.yml", ReleaseDir: rel, Project: project, Stage: "rendered: "}
		err := j.Verdict(false)
		assertRefusal(t, err, protocol.CodePrivileged, "rendered: dc.yml: 1 finding(s) (bundle.json agent.allow_privileged is not set): api: volumes[0]: bind source outside")
		if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("detail %q carries a value", err)
		}
	})
	t.Run("the loader's words are redacted before they are cut", func(t *testing.T) {
		// compose-go quotes an invalid port whole; the secret ends off bytes past the 1 KiB cut.
		const pw = "Q7ZK9W4PV2MJ8H"
		red := &secret.Redactor{}
		red.Add(pw)
		prefix := "docker-compose.yml does not load as compose loads it: Invalid containerPort: "
		for off := -2; off <= len(pw)+2; off++ {
			pad := MaxLoadError - len("…") - len(prefix) + len("docker-compose.yml ") - len(pw) + off
			port := strings.Repeat("a", pad) + pw + strings.Repeat("b", 64)
			rendered := fmt.Sprintf(`{"services":{"api":{"image":"x","ports":[%q]}}}`, port)
			err := JudgeRendered([]byte(rendered), "docker-compose.yml", rel, project, false, Host{}, red)
			assertRefusal(t, err, protocol.CodeBundleInvalid, prefix)
			for k := 2; k <= len(pw); k++ {
				for i := 0; i+k <= len(pw); i++ {
					if strings.Contains(err.Error(), pw[i:i+k]) {
						t.Fatalf("offset %d: %q of the secret survives: …%s", off, pw[i:i+k], err.Error()[len(err.Error())-40:])
					}
				}
			}
		}
		if err := JudgeRendered([]byte(svc("")), "dc.yml", rel, project, false, Host{}, nil); err == nil || strings.Contains(err.Error(), "REFUSED") {
			t.Errorf("JudgeRendered without a redactor = %v, want the caller's error", err)
		}
	})
	t.Run("relative release directory is the caller's error", func(t *testing.T) {
		err := composeBundle("", svc(""), false, "").Check("releases/x", project, Host{})
		var r *protocol.Refusal
		if err == nil || errors.As(err, &r) {
			t.Errorf("Check = %v, want a plain error", err)
		}
	})
}

func TestJudgeBoundedCost(t *testing.T) {
	t.Run("past 1 MiB refused before decoding", func(t *testing.T) {
		big := svc("") + "x-pad: \"" + strings.Repeat("a", MaxComposeBytes) + "\"\n"
		assertRefusal(t, composeBundle("", big, false, "").Check(rel, project, Host{}), protocol.CodeBundleInvalid, "the limit is 1048576 (1 MiB)")
	})
	t.Run("one mapping of many keys refused before the quadratic key check", func(t *testing.T) {
		var b strings.Builder
		b.WriteString(svc("") + "x-keys:\n")
		for i := 0; b.Len() < MaxComposeBytes-20; i++ {
			fmt.Fprintf(&b, "  k%d: 1\n", i)
		}
		assertRefusal(t, composeBundle("", b.String(), false, "").Check(rel, project, Host{}), protocol.CodeBundleInvalid, "mappings of too many keys")
	})
	t.Run("a 1 MiB file of many services is judged", func(t *testing.T) {
		data := manyServices(MaxComposeBytes)
		if err := composeBundle("", data, false, "").Check(rel, project, Host{}); err != nil {
			t.Fatalf("refused: %.300v", err)
		}
	})
	t.Run("past the node cap refused before decoding", func(t *testing.T) {
		var b strings.Builder
		b.WriteString(svc("    command:\n"))
		for range maxComposeNodes {
			b.WriteString("      - x\n")
		}
		assertRefusal(t, composeBundle("", b.String(), false, "").Check(rel, project, Host{}), protocol.CodeBundleInvalid, "has more than 30000 YAML nodes")
	})
	t.Run("18 KB of lists nested 9,000 deep refused before the loader", func(t *testing.T) {
		deep := svc("") + "x-deep: " + strings.Repeat("[", 9000) + strings.Repeat("]", 9000) + "\n"
		assertRefusal(t, composeBundle("", deep, false, "").Check(rel, project, Host{}), protocol.CodeBundleInvalid, "nests deeper than 64 levels")
	})
	t.Run("mappings nested deep through aliases", func(t *testing.T) {
		var b strings.Builder
		b.WriteString("x-m0: &m0 {k: v}\n")
		for i := 1; i <= 100; i++ {
			fmt.Fprintf(&b, "x-m%d: &m%d {k: *m%d}\n", i, i, i-1)
		}
		assertRefusal(t, composeBundle("", b.String()+svc(""), false, "").Check(rel, project, Host{}), protocol.CodeBundleInvalid, "nests deeper than 64 levels (aliases expanded)")
	})
	t.Run("nesting at the bound is judged", func(t *testing.T) {
		// services, api, labels and x-: 61 lists more make the deepest scalar level 64
		ok := svc("") + "x-deep: " + strings.Repeat("[", 62) + "x" + strings.Repeat("]", 62) + "\n"
		if err := composeBundle("", ok, false, "").Check(rel, project, Host{}); err != nil {
			t.Fatalf("refused: %v", err)
		}
		over := svc("") + "x-deep: " + strings.Repeat("[", 63) + "x" + strings.Repeat("]", 63) + "\n"
		assertRefusal(t, composeBundle("", over, false, "").Check(rel, project, Host{}), protocol.CodeBundleInvalid, "nests deeper than 64 levels")
	})
	t.Run("aliases of aliases are bounded", func(t *testing.T) {
		doc := "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n" +
			"d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n" +
			"services:\n  api:\n    image: x\n    command: *f\n"
		assertRefusal(t, composeBundle("", doc, false, "").Check(rel, project, Host{}), protocol.CodeBundleInvalid, "")
	})
}

func manyServices(size int) string { return bundletest.ManyServices(size) }

// BenchmarkJudge is the pre-lease judgement (load + policy) of a typical 5-service compose file
// and of a 1 MiB one; the agent's benchmark adds the post-render judgement with the real
// `docker compose config` process.
func BenchmarkJudge(b *testing.B) {
	typical, err := os.ReadFile("testdata/compose/03-nginx-app.yml")
	if err != nil {
		b.Fatal(err)
	}
	typical = append(typical, []byte(strings.TrimPrefix(mustRead(b, "testdata/compose/04-redis-worker.yml"), "services:\n"))...)
	for _, c := range []struct {
		name string
		data string
	}{{"typical-5-services", strings.Replace(string(typical), "volumes:\n  dbdata: {}\n", "", 1) + "  dbdata: {}\n"}, {"1MiB", manyServices(MaxComposeBytes)}} {
		bu := composeBundle("", c.data, false, "DB_PASSWORD=${DB_PASSWORD}\n")
		if err := bu.Check(rel, project, Host{}); err != nil {
			b.Fatalf("%s refused: %.300v", c.name, err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.data)))
			for b.Loop() {
				if err := bu.Check(rel, project, Host{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkJudgeDeep is the judgement of deep nesting within the size cap: 18 KB of lists 9,000
// deep (refused before compose-go's loader, which once spent 64 s on it) and the deepest file
// the bound lets through to the loader.
func BenchmarkJudgeDeep(b *testing.B) {
	for _, c := range []struct {
		name, data string
		refused    bool
	}{
		{"9000-deep", svc("") + "x-deep: " + strings.Repeat("[", 9000) + strings.Repeat("]", 9000) + "\n", true},
		{"64-deep", svc("") + "x-deep: " + strings.Repeat("[", 62) + "x" + strings.Repeat("]", 62) + "\n", false},
		{"64-deep-wide", svc("") + "x-deep: " + strings.Repeat("[x, ", 62) + "x" + strings.Repeat("]", 62) + "\n", false},
	} {
		bu := composeBundle("", c.data, false, "")
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.data)))
			for b.Loop() {
				if err := bu.Check(rel, project, Host{}); (err != nil) != c.refused {
					b.Fatalf("Check = %v", err)
				}
			}
		})
	}
}

func mustRead(tb testing.TB, p string) string {
	tb.Helper()
	d, err := os.ReadFile(p)
	if err != nil {
		tb.Fatal(err)
	}
	return string(d)
}
