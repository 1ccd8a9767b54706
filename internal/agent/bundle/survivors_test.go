package bundle

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// Tests that close survivors of `make mutate` in this package (README, "Mutation testing"):
// the raw walk's own findings (the loader's judgement refuses most of the same files for
// another reason, so only the findings themselves tell) and every cap at its exact edge.

// rawFindings is what the raw walk finds in one compose file, as "subject: key" lines.
func rawFindings(t *testing.T, compose string) []string {
	t.Helper()
	docs, err := parseRaw([]byte(compose), 1)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := walkRaw(docs)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range fs {
		out = append(out, f.Subject+": "+f.Key)
	}
	return out
}

func TestRawWalkFindings(t *testing.T) {
	for _, tc := range []struct {
		name, compose string
		want          []string
	}{
		{"a variable in a judged key", "services:\n  web:\n    image: x\n    privileged: ${P}\n", []string{"web: privileged"}},
		{"a variable merged in", "x-base: &base\n  privileged: ${P}\nservices:\n  web:\n    <<: *base\n    image: x\n", []string{"web: privileged"}},
		{"a variable merged from a list", "x-a: &a\n  image: x\nx-b: &b\n  cap_add: [\"${C}\"]\nservices:\n  web:\n    <<: [*a, *b]\n", []string{"web: cap_add"}},
		{"a quoted << is a key, not a merge", "x-base: &base\n  privileged: ${P}\nservices:\n  web:\n    image: x\n    \"<<\": *base\n", []string{"web: <<"}},
		{"a variable in an unjudged key", "services:\n  web:\n    image: ${IMAGE}\n    x-note: ${N}\n", nil},
		{"an aliased service", "x-web: &web\n  image: x\n  pid: ${PID}\nservices:\n  web: *web\n", []string{"web: pid"}},
		{"include", "include:\n  - other.yaml\nservices:\n  web:\n    image: x\n", []string{"(file): include"}},
		{"extends.file", "services:\n  web:\n    extends:\n      file: base.yaml\n      service: web\n", []string{"web: extends.file"}},
		{"extends within the file", "services:\n  base:\n    image: x\n  web:\n    extends:\n      service: base\n", nil},
		{"deploy: a device's variable", "services:\n  web:\n    image: x\n    deploy:\n      resources:\n        reservations:\n          devices:\n            - driver: ${D}\n", []string{"web: deploy"}},
		{"deploy: replicas are not judged", "services:\n  web:\n    image: x\n    deploy:\n      replicas: ${N}\n", nil},
		{"networks: a list of names", "services:\n  web:\n    image: x\n    networks: [\"${NET}\"]\n", nil},
		{"networks: driver_opts", "services:\n  web:\n    image: x\n    networks:\n      front:\n        driver_opts:\n          o: ${O}\n", []string{"web: networks"}},
		{"networks: an alias is not judged", "services:\n  web:\n    image: x\n    networks:\n      front:\n        aliases: [\"${A}\"]\n", nil},
		{"a top-level volume's option", "services:\n  web:\n    image: x\nvolumes:\n  data:\n    driver_opts:\n      device: ${DEV}\n    labels:\n      a: ${L}\n", []string{"volume data: driver_opts"}},
		{"escaped dollars", "services:\n  web:\n    image: x\n    privileged: $$P\n", nil},
		{"a variable in a mapping's value, not its key", "services:\n  web:\n    image: x\n    sysctls:\n      net.core.somaxconn: ${S}\n", []string{"web: sysctls"}},
		{"a variable in a list", "services:\n  web:\n    image: x\n    devices:\n      - /dev/null\n      - ${DEV}\n", []string{"web: devices"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := rawFindings(t, tc.compose)
			if !slices.Equal(got, tc.want) {
				t.Errorf("findings %q, want %q", got, tc.want)
			}
		})
	}
}

// Merges of merges are followed to maxMergeDepth and refused past it.
func TestRawWalkMergeDepth(t *testing.T) {
	chain := func(depth int) string {
		var b strings.Builder
		b.WriteString("x-m0: &m0\n  privileged: ${P}\n")
		for i := 1; i <= depth; i++ {
			fmt.Fprintf(&b, "x-m%d: &m%d\n  <<: *m%d\n", i, i, i-1)
		}
		fmt.Fprintf(&b, "services:\n  web:\n    image: x\n    <<: *m%d\n", depth)
		return b.String()
	}
	walk := func(depth int) ([]Finding, error) {
		docs, err := parseRaw([]byte(chain(depth)), 1)
		if err != nil {
			t.Fatal(err)
		}
		return walkRaw(docs)
	}
	if fs, err := walk(maxMergeDepth - 1); err != nil || len(fs) != 1 {
		t.Errorf("merges %d deep: %v, %v; want the variable found", maxMergeDepth, fs, err)
	}
	if _, err := walk(maxMergeDepth); err == nil || !strings.Contains(err.Error(), "nested deeper") {
		t.Errorf("merges %d deep: %v, want refused", maxMergeDepth+1, err)
	}
}

// An alias resolves to its anchor's node; nothing resolves to nothing.
func TestResolve(t *testing.T) {
	docs, err := parseRaw([]byte("a: &a {k: v}\nc: *a\n"), 1)
	if err != nil {
		t.Fatal(err)
	}
	top := docs[0].Content[0]
	if n := resolve(top.Content[3]); n != top.Content[1] {
		t.Errorf("c resolves to %v, want a's mapping", n)
	}
	if n := resolve(top.Content[1]); n != top.Content[1] {
		t.Error("a node that is no alias does not resolve to itself")
	}
	if resolve(nil) != nil {
		t.Error("nil resolves to something")
	}
}

// The compose caps hold at their exact edges, and a rendered file's scale multiplies them.
func TestParseRawCapsAtTheEdge(t *testing.T) {
	for _, scale := range []int{1, renderedScale} {
		limit := MaxComposeBytes * scale
		atLimit := "a: " + strings.Repeat("x", limit-4) + "\n"
		if _, err := parseRaw([]byte(atLimit), scale); err != nil {
			t.Errorf("scale %d: a file of exactly %d bytes: %v", scale, limit, err)
		}
		if _, err := parseRaw([]byte(atLimit+" "), scale); err == nil || !strings.Contains(err.Error(), fmt.Sprint(limit)) {
			t.Errorf("scale %d: a file of %d bytes: %v, want refused naming the limit", scale, limit+1, err)
		}
	}
	// Nodes: a document node, a sequence, then its items.
	nodes := func(n int) string { return strings.Repeat("- v\n", n-2) }
	if _, err := parseRaw([]byte(nodes(maxComposeNodes)), 1); err != nil {
		t.Errorf("%d nodes: %v", maxComposeNodes, err)
	}
	if _, err := parseRaw([]byte(nodes(maxComposeNodes+1)), 1); err == nil || !strings.Contains(err.Error(), "YAML nodes") {
		t.Errorf("%d nodes: %v, want refused", maxComposeNodes+1, err)
	}
	if _, err := parseRaw([]byte(nodes(maxComposeNodes+1)), 2); err != nil {
		t.Errorf("%d nodes at scale 2: %v", maxComposeNodes+1, err)
	}
	// Key work: the sum of keys² over mappings, scale² times the cap.
	keys := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "k%d: 1\n", i)
		}
		return b.String()
	}
	if _, err := parseRaw([]byte(keys(4096)), 1); err != nil {
		t.Errorf("a mapping of 4,096 keys (key work exactly %d): %v", maxKeyWork, err)
	}
	if _, err := parseRaw([]byte(keys(4097)), 1); err == nil || !strings.Contains(err.Error(), "too many keys") {
		t.Errorf("a mapping of 4,097 keys: %v, want refused", err)
	}
	if _, err := parseRaw([]byte(keys(8192)), 2); err != nil {
		t.Errorf("a mapping of 8,192 keys at scale 2 (key work exactly 4 × %d): %v", maxKeyWork, err)
	}
	// Depth: each level a one-key mapping.
	nested := func(depth int) string {
		return strings.Repeat("{a: ", depth-1) + "1" + strings.Repeat("}", depth-1) + "\n"
	}
	if _, err := parseRaw([]byte(nested(MaxComposeDepth)), 1); err != nil {
		t.Errorf("%d levels: %v", MaxComposeDepth, err)
	}
	if _, err := parseRaw([]byte(nested(MaxComposeDepth+1)), 1); err == nil || !strings.Contains(err.Error(), "deeper") {
		t.Errorf("%d levels: %v, want refused", MaxComposeDepth+1, err)
	}
}

// checkPaths' caps hold at their exact edges.
func TestCheckPathsAtTheEdge(t *testing.T) {
	files := func(n, size int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprintf("f%03d", i)] = strings.Repeat("x", size)
		}
		return m
	}
	if err := checkPaths(files(MaxFiles, 1)); err != nil {
		t.Errorf("%d files: %v", MaxFiles, err)
	}
	if err := checkPaths(files(MaxFiles+1, 1)); err == nil {
		t.Errorf("%d files accepted", MaxFiles+1)
	}
	if err := checkPaths(files(2, MaxTotalBytes/2)); err != nil {
		t.Errorf("%d bytes in all: %v", MaxTotalBytes, err)
	}
	m := files(2, MaxTotalBytes/2)
	m["f000"] += "x"
	if err := checkPaths(m); err == nil {
		t.Errorf("%d bytes in all accepted", MaxTotalBytes+1)
	}
	for p, want := range map[string]bool{"a\x1fb": false, "a b": true, "a~b": true, "a\x7fb": false} {
		if ok := badPath(p) == ""; ok != want {
			t.Errorf("path %q accepted %v, want %v", p, ok, want)
		}
	}
}

// healthy_timeout_s may be the protocol's maximum, not more; a version is a plain integer ≥ 1,
// its first digit any of 0–9.
func TestMetaEdges(t *testing.T) {
	meta := func(timeout int) map[string]string {
		b, _ := json.Marshal(map[string]any{"agent": map[string]any{"healthy_timeout_s": timeout}})
		return map[string]string{MetaFile: string(b), DefaultComposeFile: "services: {}\n"}
	}
	if m, err := parseMeta(meta(protocol.MaxHealthyTimeoutS)); err != nil || m.Agent.HealthyTimeoutS != protocol.MaxHealthyTimeoutS {
		t.Errorf("healthy_timeout_s %d: %v", protocol.MaxHealthyTimeoutS, err)
	}
	if _, err := parseMeta(meta(protocol.MaxHealthyTimeoutS + 1)); err == nil {
		t.Errorf("healthy_timeout_s %d accepted", protocol.MaxHealthyTimeoutS+1)
	}
	for raw, want := range map[string]int{"9": 9, "10": 10, "1": 1} {
		if v, err := parseVersion(json.RawMessage(raw)); err != nil || v != want {
			t.Errorf("version %s: %d, %v", raw, v, err)
		}
	}
	for _, raw := range []string{"0", "-1", "/", ":", "\"1\""} {
		if _, err := parseVersion(json.RawMessage(raw)); err == nil {
			t.Errorf("version %s accepted", raw)
		}
	}
}

// The policy's edges found by mutants: a neutral oom_score_adj, an anonymous volume, the IPv4
// space written as IPv6 (mapped, or inside a wider IPv6 range), a secret's file.
func TestJudgePolicyEdges(t *testing.T) {
	for name, body := range map[string]string{
		"an anonymous volume": "    volumes: [\"/data\"]\n",
	} {
		if err := composeBundle("", svc(body), false, "").Check(rel, project, Host{}); err != nil {
			t.Errorf("%s refused: %v", name, err)
		}
	}
	network := func(subnet string) *Bundle {
		return composeBundle("", svc("    networks: [lan]\n")+"networks:\n  lan:\n    ipam:\n      config: [{subnet: \""+subnet+"\"}]\n", false, "")
	}
	// Wider IPv6 ranges holding the IPv4-mapped space (::ffff:0:0/96) without the loopback ::1.
	for _, subnet := range []string{"::ffff:0:0/96", "::ffff:127.0.0.0/104", "::fffe:0:0/95", "::ff00:0:0/88"} {
		assertRefusal(t, network(subnet).Check(rel, project, Host{}), protocol.CodePrivileged, "network lan: ipam.config[0].subnet: overlaps")
	}
	for _, subnet := range []string{"::ffff:10.20.0.0/112", "fd00::/96", "2001:db8::/32"} {
		if err := network(subnet).Check(rel, project, Host{}); err != nil {
			t.Errorf("%s refused: %v", subnet, err)
		}
	}
	b := composeBundle("", svc("    secrets: [s]\n")+"secrets:\n  s:\n    file: /etc/shadow\n", false, "")
	assertRefusal(t, b.Check(rel, project, Host{}), protocol.CodeBundleInvalid, "secret s: file: outside the release directory")
	// A secret's file under a directory a service may write: the service plants a symlink there.
	b = composeBundle("", svc("    secrets: [s]\n    volumes: [\"./shared:/shared\"]\n")+"secrets:\n  s:\n    file: ./shared/s.txt\n", false, "")
	b.Files["shared/s.txt"] = "x\n"
	if err := b.Check(rel, project, Host{}); err == nil || !strings.Contains(err.Error(), "secret s") {
		t.Errorf("a secret's file under a writable bind: %v, want refused naming the secret", err)
	}
	// Networks: one named outside the project; an external one keyed host but named otherwise.
	assertRefusal(t, composeBundle("", svc("    networks: [lan]\n")+"networks:\n  lan:\n    name: elsewhere\n", false, "").Check(rel, project, Host{}),
		protocol.CodePrivileged, "network lan: name: names a network outside this project")
	if err := composeBundle("", svc("    networks: [host]\n")+"networks:\n  host:\n    external: true\n    name: lan0\n", false, "").Check(rel, project, Host{}); err != nil && strings.Contains(err.Error(), "the host's network") {
		t.Errorf("an external network keyed host but named lan0 judged the host's: %v", err)
	}
}

// Aliases that expand past the node cap are refused before compose-go sees them: a tree of 9
// aliases per level, 5 levels (~59,000 nodes from a few hundred).
func TestAliasExpansionIsCapped(t *testing.T) {
	var b strings.Builder
	b.WriteString("x-l0: &l0 [a, b, c, d, e, f, g, h, i]\n")
	for l := 1; l <= 5; l++ {
		fmt.Fprintf(&b, "x-l%d: &l%d [", l, l)
		for i := range 9 {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*l%d", l-1)
		}
		b.WriteString("]\n")
	}
	b.WriteString("services:\n  web:\n    image: x\n")
	if _, err := parseRaw([]byte(b.String()), 1); err == nil || !strings.Contains(err.Error(), "expands through aliases") {
		t.Errorf("a 9^5 alias tree: %v, want refused by the expansion cap", err)
	}
}

// A cut detail counts exactly what it left out, and is cut only when the next finding would not
// fit: the findings shown and the count add up, and the detail is within a finding of the limit.
func TestJudgeDetailCountsWhatItLeftOut(t *testing.T) {
	var b strings.Builder
	b.WriteString("services:\n")
	const n = 2000
	for i := range n {
		fmt.Fprintf(&b, "  s%04d: {image: x, privileged: true}\n", i)
	}
	err := composeBundle("", b.String(), false, "").Check(rel, project, Host{})
	if err == nil {
		t.Fatal("accepted")
	}
	msg := err.Error()
	i := strings.LastIndex(msg, "; … ")
	var more int
	if i < 0 {
		t.Fatalf("no count: …%s", msg[max(len(msg)-80, 0):])
	}
	if _, err := fmt.Sscanf(msg[i:], "; … %d more", &more); err != nil {
		t.Fatal(err)
	}
	shown := strings.Count(msg[:i], ": privileged: ")
	if shown+more != n {
		t.Errorf("%d findings shown and %d counted as left out, want %d in all", shown, more, n)
	}
	finding := len("; s0000: privileged: ") + 60 // one finding's line, generously
	if len(msg) > MaxFindingsDetail || len(msg) < MaxFindingsDetail-finding {
		t.Errorf("detail of %d bytes, want within a finding of %d", len(msg), MaxFindingsDetail)
	}
}

// A file with include or extends.file is judged no further: its findings are the answer, not
// the loader's failure to read the other file.
func TestFindingsStopAtAnotherFile(t *testing.T) {
	for _, compose := range []string{
		"include:\n  - other.yaml\nservices:\n  web:\n    image: x\n",
		"services:\n  web:\n    extends:\n      file: base.yaml\n      service: web\n",
	} {
		fs, err := Judgement{Compose: []byte(compose), File: "dc.yml", ReleaseDir: rel, Project: project}.Findings()
		if err != nil || len(fs) != 1 || !fs[0].Invalid {
			t.Errorf("%q: %v, %v; want the one finding", compose, fs, err)
		}
	}
}

// The .env template's references: a `$` that ends the line, a quoted value whose reference is
// not a name.
func TestEnvTemplateEdges(t *testing.T) {
	if refs := findRefs("A=price$"); len(refs) != 0 {
		t.Errorf("a trailing $: %v", refs)
	}
	if _, _, _, ok := wholeValue(`A="${1BAD}"`); ok {
		t.Error(`"${1BAD}" read as one reference`)
	}
	if p, name, s, ok := wholeValue(`A="${GOOD}"`); !ok || name != "GOOD" || p != "A=" || s != "" {
		t.Errorf(`"${GOOD}": %q %q %q %v`, p, name, s, ok)
	}
}

// A manifest path may hold a space (0x20), not a control character.
func TestManifestPathEdges(t *testing.T) {
	if why := badManifestPath("app/a b"); why != "" {
		t.Errorf("a path with a space: %s", why)
	}
	if why := badManifestPath("app/a\x1fb"); why == "" {
		t.Error("a path with 0x1f accepted")
	}
}
