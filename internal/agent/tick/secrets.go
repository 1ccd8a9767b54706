package tick

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/compose-spec/compose-go/v2/dotenv"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bundle"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/registryauth"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/release"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/token"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// SecretsOnDisk is a redactor of the secrets the box holds at rest: the OpenBao token, the
// registry credential in the agent's Docker config and the manifest's values in the applied
// release's .env, read back as a revert reads it. Operator text that leaves the box (a hold's
// reason) is checked against it; err says what could not be read, or which values could only be
// partly told apart (see markedValues), without quoting any of them.
func SecretsOnDisk(cfg *config.Config, st *state.State) (*secret.Redactor, error) {
	red := &secret.Redactor{}
	return red, addSecretsOnDisk(red, cfg, st)
}

// addSecretsOnDisk adds to red what SecretsOnDisk holds: the tick seeds its own redactor with it
// before a hold's text is redacted, since a held tick reads no KV value.
func addSecretsOnDisk(red *secret.Redactor, cfg *config.Config, st *state.State) error {
	if raw, err := token.ReadFile(cfg.TokenPath()); err == nil {
		red.Add(strings.TrimSpace(string(raw)))
	}
	// The registry credential never reaches the .env: it lives in the agent's Docker config.
	creds, err := registryauth.ReadDockerConfig(cfg.DockerConfigDir())
	for _, c := range creds {
		red.Add(c.Reveal())
	}
	if err != nil {
		return err
	}
	sha := st.AppliedSha
	if sha == "" {
		return nil
	}
	dir := release.Dir(cfg.EnvDir(), sha)
	var files map[string]string
	if staged := st.StagedFiles(sha); staged != nil {
		files, err = readStaged(dir, staged)
	} else {
		files, err = readRelease(dir)
	}
	if err != nil {
		return err
	}
	b, err := bundle.Parse(files, sha)
	if err != nil {
		return err
	}
	root, err := release.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	raw, err := readRegular(root, release.EnvFile, maxReleaseBytes, nil)
	if err != nil {
		return err
	}
	env, err := dotenv.UnmarshalBytesWithLookup(raw, func(string) (string, bool) { return "", false })
	if err != nil {
		return err
	}
	// The template says where each secret went: render it with a marker per variable and read
	// each secret out of the .env value in the marker's place (`URL=https://${HOST}/api`, and
	// `DSN=postgres://app:${DB_PASS}@${DB_HOST}/app` too).
	markers := map[string]secret.Value{}
	names := map[string]string{} // marker → variable
	for i, e := range b.EnvEntries() {
		m := fmt.Sprintf("MONKYMARK%dX", i)
		markers[e.Var], names[m] = secret.New(m), e.Var
	}
	text, err := bundle.RenderEnv(b.EnvTemplate, markers)
	if err != nil {
		return err
	}
	stand, err := dotenv.UnmarshalBytesWithLookup([]byte(text), func(string) (string, bool) { return "", false })
	if err != nil {
		return err
	}
	var loose []string
	for _, k := range slices.Sorted(maps.Keys(stand)) {
		sv := stand[k]
		real, ok := env[k]
		if !ok || !marker.MatchString(sv) {
			continue
		}
		red.Add(real) // the whole value carries a secret
		proven, unsure := markedValues(sv, real)
		red.Add(proven...)
		for _, m := range unsure {
			loose = append(loose, k+" "+names[m])
		}
	}
	if len(loose) > 0 {
		return fmt.Errorf("tick: .env: %s: not told apart from the text beside them, only the part every reading of the line gives them is known", strings.Join(slices.Compact(slices.Sorted(slices.Values(loose))), ", "))
	}
	return nil
}

// marker is what SecretsOnDisk renders the template with in place of each variable.
var marker = regexp.MustCompile(`MONKYMARK[0-9]+X`)

// markedValues reads out of real (a .env value) what each marker of stand (the same value rendered
// with markers) stands for: stand is cut at every marker, and its literal pieces are found in real
// in order, the first at its start and the last at its end. A value between two markers (or one
// holding a piece's text, `${U}:${P}` with a `:` in P) may read more than one way: then a marker
// whose neighbours' places differ between the leftmost and the rightmost reading is unsure, and
// proven gets only the part every reading gives it (between the latest end of the piece before
// and the earliest start of the piece after); the rest of that value is NOT recovered, and may be
// empty or too short to mask. A real that does not read as stand (a hand-edited .env) recovers
// no marker: each is unsure, and only the line's whole value is known.
func markedValues(stand, real string) (proven, unsure []string) {
	locs := marker.FindAllStringIndex(stand, -1)
	n := len(locs)
	pieces, marks := make([]string, n+1), make([]string, n)
	last := 0
	for i, l := range locs {
		pieces[i], marks[i] = stand[last:l[0]], stand[l[0]:l[1]]
		last = l[1]
	}
	pieces[n] = stand[last:]
	head, tail := pieces[0], pieces[n]
	if len(real) < len(head)+len(tail) || !strings.HasPrefix(real, head) || !strings.HasSuffix(real, tail) {
		return nil, marks
	}
	inner := real[len(head) : len(real)-len(tail)]
	// early[j] and late[j]: where piece j starts in inner, leftmost and rightmost reading; the
	// head "starts" at 0 and the tail at len(inner) in both.
	early, late := make([]int, n+1), make([]int, n+1)
	early[n], late[n] = len(inner), len(inner)
	at := 0
	for j := 1; j < n; j++ {
		k := strings.Index(inner[at:], pieces[j])
		if k < 0 {
			return nil, marks
		}
		early[j] = at + k
		at = early[j] + len(pieces[j])
	}
	at = len(inner)
	for j := n - 1; j >= 1; j-- {
		late[j] = strings.LastIndex(inner[:at], pieces[j]) // found: the leftmost reading exists
		at = late[j]
	}
	end := func(start []int, j int) int {
		if j == 0 {
			return 0
		}
		return start[j] + len(pieces[j])
	}
	for i := range n {
		if early[i] == late[i] && early[i+1] == late[i+1] {
			proven = append(proven, inner[end(early, i):early[i+1]])
			continue
		}
		unsure = append(unsure, marks[i])
		if from, to := end(late, i), early[i+1]; from < to {
			proven = append(proven, inner[from:to])
		}
	}
	return proven, unsure
}
