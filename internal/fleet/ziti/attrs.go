package ziti

import "strings"

// HostPrefix starts the name of every backend host identity: monky-host.<env_id>.
const HostPrefix = "monky-host."

// Role attributes a backend host identity needs: the first lets it dial tenancy's agent
// entrypoint (monky.tenancy.deploy), the second lets it reach OpenBao. Identities created before
// the broker learned to add them (env-qa-02's) had them added by hand — and one forgotten attribute
// reads, from the box, like a missing intercept.
const (
	AttrDeployAgent   = "monky-deploy-agent"
	AttrOpenBaoClient = "openbao-client"
)

// RequiredAttributes lists the attributes every host identity must carry, in the order they are
// reported.
func RequiredAttributes() []string { return []string{AttrDeployAgent, AttrOpenBaoClient} }

// IdentityName is the ziti identity name of a backend env.
func IdentityName(envID string) string { return HostPrefix + envID }

// EnvOf returns the env id of a host identity name, and false for a name that is not one.
func EnvOf(name string) (string, bool) {
	env, ok := strings.CutPrefix(name, HostPrefix)
	return env, ok && env != ""
}

// MissingAttributes returns the required attributes absent from have. A leading '#' (how the
// attributes are written in policies) is tolerated in have.
func MissingAttributes(have []string) []string {
	var missing []string
	for _, want := range RequiredAttributes() {
		found := false
		for _, h := range have {
			if strings.TrimPrefix(h, "#") == want {
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, want)
		}
	}
	return missing
}

// MergeAttributes returns have followed by the missing required attributes. A PATCH of
// roleAttributes replaces the whole list, so whatever else an operator put on the identity must
// be sent back with it.
func MergeAttributes(have []string) []string {
	out := append([]string(nil), have...)
	return append(out, MissingAttributes(have)...)
}
