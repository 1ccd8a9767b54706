package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/protocol"
)

var (
	// nameRE is what an env id, site, auth mount or role may look like: they end up in file
	// names, ansible variables and the install command an operator pastes into a root shell.
	nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	// versionRE accepts a release version (0.2.0, 0.2.0-rc.1, 0.2.0+deb12) and nothing that could
	// break out of the install URL or command line.
	versionRE = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+([-+~][0-9A-Za-z.+~-]{1,40})?$`)
)

func checkName(field, v string) error {
	if !nameRE.MatchString(v) {
		return fmt.Errorf("%s: %q is not a valid name (letters, digits, '.', '_', '-')", field, v)
	}
	return nil
}

// CheckEnvID reports whether envID is a well-formed env id.
func CheckEnvID(envID string) error { return checkName("env_id", envID) }

// ParseAgentsPage reads one page of GET /v1/admin/agents and checks what fleetctl relies on:
// `now` and every time are RFC 3339, every agent has a valid env_id, intervals are not negative,
// and a cursor, when present, is not empty. Unknown fields are ignored (tenancy only ever adds).
// Errors name the field, e.g. `agents[3] (env-x).last_checkin_at: …`.
func ParseAgentsPage(b []byte) (*protocol.AdminAgentsPage, time.Time, error) {
	var p protocol.AdminAgentsPage
	if err := decode(b, &p); err != nil {
		return nil, time.Time{}, err
	}
	if p.Now == "" {
		return nil, time.Time{}, errors.New(`field "now" is missing: staleness cannot be measured without tenancy's clock`)
	}
	now, err := parseTime("now", p.Now)
	if err != nil {
		return nil, time.Time{}, err
	}
	if p.Next != nil && *p.Next == "" {
		return nil, time.Time{}, errors.New(`field "next": empty cursor (null ends the listing)`)
	}
	for i := range p.Agents {
		a := &p.Agents[i]
		where := fmt.Sprintf("agents[%d]", i)
		if err := checkName(where+".env_id", a.EnvID); err != nil {
			return nil, time.Time{}, err
		}
		where = fmt.Sprintf("agents[%d] (%s)", i, a.EnvID)
		if a.CheckinIntervalS < 0 {
			return nil, time.Time{}, fmt.Errorf("%s.checkin_interval_s: %d is negative", where, a.CheckinIntervalS)
		}
		times := []timeField{{"last_checkin_at", a.LastCheckinAt}, {"desired_at", a.DesiredAt}, {"last_result_at", a.LastResultAt}}
		if a.Timer != nil {
			times = append(times, timeField{"timer.next_elapse", a.Timer.NextElapse}, timeField{"timer.observed_at", a.Timer.ObservedAt})
		}
		for _, t := range times {
			if t.v == nil || *t.v == "" {
				continue
			}
			if _, err := parseTime(where+"."+t.field, *t.v); err != nil {
				return nil, time.Time{}, err
			}
		}
	}
	return &p, now, nil
}

type timeField struct {
	field string
	v     *string
}

// ParseKit reads the answer to POST /v1/admin/backends/{env_id}/kit. Every value that reaches a
// file, an ansible variable or the install command is checked here, because the operator runs
// that command as root on the box.
func ParseKit(b []byte) (*protocol.KitResponse, error) {
	var k protocol.KitResponse
	if err := decode(b, &k); err != nil {
		return nil, err
	}
	if err := checkName("env_id", k.EnvID); err != nil {
		return nil, err
	}
	if err := checkName("site", k.Site); err != nil {
		return nil, err
	}
	if k.BootstrapGrant == "" {
		return nil, errors.New(`field "bootstrap_grant" is missing`)
	}
	if strings.ContainsAny(k.BootstrapGrant, " \t\r\n\"'`$\\") {
		return nil, errors.New(`field "bootstrap_grant" is not a JWT`)
	}
	if _, err := parseTime("grant_expires_at", k.GrantExpiresAt); err != nil {
		return nil, err
	}
	if !versionRE.MatchString(k.PackageVersion) {
		return nil, fmt.Errorf("package_version: %q is not a release version", k.PackageVersion)
	}
	if k.Identity != "" && k.Identity != "monky-host."+k.EnvID {
		return nil, fmt.Errorf("identity: %q is not monky-host.%s", k.Identity, k.EnvID)
	}
	if k.TenancyPort == 0 {
		k.TenancyPort = 443
	}
	if k.TenancyPort < 1 || k.TenancyPort > 65535 {
		return nil, fmt.Errorf("tenancy_port: %d is not a port", k.TenancyPort)
	}
	if k.TenancyService != "" {
		if err := checkName("tenancy_service", k.TenancyService); err != nil {
			return nil, err
		}
	}
	if k.BaoAddr != "" {
		u, err := url.Parse(k.BaoAddr)
		if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("bao_addr: %q is not an https URL", k.BaoAddr)
		}
	}
	for _, f := range []struct{ name, v string }{{"bao_auth_mount", k.BaoAuthMount}, {"bao_role", k.BaoRole}} {
		if f.v == "" {
			continue
		}
		if err := checkName(f.name, f.v); err != nil {
			return nil, err
		}
	}
	return &k, nil
}

// decode reads one JSON object; a type mismatch names the field.
func decode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("field %q: %s where %s was expected", te.Field, te.Value, te.Type)
		}
		return fmt.Errorf("not a JSON object: %w", err)
	}
	if dec.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

func parseTime(field, v string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %q is not an RFC 3339 time", field, clip(v, 40))
	}
	return t, nil
}

// clip cuts s to at most n bytes without splitting a UTF-8 sequence.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
