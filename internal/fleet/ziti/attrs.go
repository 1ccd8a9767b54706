package ziti

import (
	"slices"
	"strings"
)

// HostPrefix starts the name of every backend host identity: monky-host.<env_id>.
const HostPrefix = "monky-host."

// Role attributes a host identity needs to dial tenancy's agent entrypoint and OpenBao. Early
// identities (env-qa-02's) got them by hand; a forgotten one reads, from the box, like a missing intercept.
const (
	AttrDeployAgent   = "monky-deploy-agent"
	AttrOpenBaoClient = "openbao-client"
)

// RequiredAttributes lists the attributes every host identity must carry, in report order.
func RequiredAttributes() []string { return []string{AttrDeployAgent, AttrOpenBaoClient} }

// IdentityName is the ziti identity name of a backend env.
func IdentityName(envID string) string { return HostPrefix + envID }

// EnvOf returns the env id of a host identity name, and false for a name that is not one.
func EnvOf(name string) (string, bool) {
	env, ok := strings.CutPrefix(name, HostPrefix)
	return env, ok && env != ""
}

// MissingAttributes returns the required attributes absent from have ('#attr', as policies
// write them, counts); never nil, as it is a JSON list.
func MissingAttributes(have []string) []string {
	missing := []string{}
	for _, want := range RequiredAttributes() {
		if !slices.ContainsFunc(have, func(h string) bool { return strings.TrimPrefix(h, "#") == want }) {
			missing = append(missing, want)
		}
	}
	return missing
}

// MergeAttributes returns have plus the missing required attributes: a PATCH replaces the
// whole list, so what an operator added must be sent back.
func MergeAttributes(have []string) []string {
	out := append([]string(nil), have...)
	return append(out, MissingAttributes(have)...)
}
