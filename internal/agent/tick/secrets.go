package tick

import (
	"fmt"
	"os"
	"strings"

	"github.com/compose-spec/compose-go/v2/dotenv"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bundle"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/registryauth"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/release"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// SecretsOnDisk is a redactor of the secrets the box holds at rest: the OpenBao token, the
// registry credential in the agent's Docker config and the manifest's values in the applied release's .env, read back as a revert reads it. Operator text
// that leaves the box (a hold's reason) is checked against it; err says what could not be read.
func SecretsOnDisk(cfg *config.Config, st *state.State) (*secret.Redactor, error) {
	red := &secret.Redactor{}
	if raw, err := os.ReadFile(cfg.TokenPath()); err == nil {
		red.Add(strings.TrimSpace(string(raw)))
	}
	// The registry credential never reaches the .env: it lives in the agent's Docker config.
	creds, err := registryauth.ReadDockerConfig(cfg.DockerConfigDir())
	for _, c := range creds {
		red.Add(c.Reveal())
	}
	if err != nil {
		return red, err
	}
	sha := st.AppliedSha
	if sha == "" {
		return red, nil
	}
	dir := release.Dir(cfg.EnvDir(), sha)
	var files map[string]string
	if staged := st.StagedFiles(sha); staged != nil {
		files, err = readStaged(dir, staged)
	} else {
		files, err = readRelease(dir)
	}
	if err != nil {
		return red, err
	}
	b, err := bundle.Parse(files, sha)
	if err != nil {
		return red, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return red, err
	}
	defer root.Close()
	raw, err := readRegular(root, release.EnvFile, maxReleaseBytes, nil)
	if err != nil {
		return red, err
	}
	env, err := dotenv.UnmarshalBytesWithLookup(raw, func(string) (string, bool) { return "", false })
	if err != nil {
		return red, err
	}
	// The template says where each secret went: render it with a marker per variable and read
	// each secret out of the .env value in the marker's place (`URL=https://${HOST}/api` too).
	markers := map[string]secret.Value{}
	for i, e := range b.EnvEntries() {
		markers[e.Var] = secret.New(fmt.Sprintf("MONKYMARK%dX", i))
	}
	text, err := bundle.RenderEnv(b.EnvTemplate, markers)
	if err != nil {
		return red, err
	}
	stand, err := dotenv.UnmarshalBytesWithLookup([]byte(text), func(string) (string, bool) { return "", false })
	if err != nil {
		return red, err
	}
	for k, sv := range stand {
		real, ok := env[k]
		if !ok || !strings.Contains(sv, "MONKYMARK") {
			continue
		}
		red.Add(real) // the whole value carries a secret
		for _, m := range markers {
			mark := m.Reveal()
			if before, after, found := strings.Cut(sv, mark); found && !strings.Contains(before+after, "MONKYMARK") &&
				strings.HasPrefix(real, before) && strings.HasSuffix(real, after) && len(real) >= len(before)+len(after) {
				red.Add(real[len(before) : len(real)-len(after)])
			}
		}
	}
	return red, nil
}
