package admin

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/clip"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/strictjson"
)

// nameRE: env ids and the kit's names end up in file names, ansible variables and a root shell.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

func checkName(field, v string) error {
	if !nameRE.MatchString(v) {
		return fmt.Errorf("%s: %q is not a valid name (letters, digits, '.', '_', '-')", field, v)
	}
	return nil
}

// CheckEnvID reports whether envID is a well-formed env id.
func CheckEnvID(envID string) error { return checkName("env_id", envID) }

// CheckKitName checks v as install.sh's --env or --site, before a reveal supersedes the env's
// grants: a kit ParseKit would refuse is never paid for with a working one.
func CheckKitName(field, v string) error {
	if !kitNameRE.MatchString(v) {
		return fmt.Errorf("%s: %q is not a valid kit name (lower-case letters, digits and '-', at most 63)", field, v)
	}
	return nil
}

// ParseAgentsPage reads one page of GET /v1/admin/agents, checking what fleetctl relies on;
// unknown fields are ignored (tenancy only adds), errors name the field.
func ParseAgentsPage(b []byte) (*protocol.AdminAgentsPage, time.Time, error) {
	page, agents, err := readAgentsPage(bytes.NewReader(b), nil)
	if err != nil {
		return nil, time.Time{}, err
	}
	return &protocol.AdminAgentsPage{Now: page.rawNow, Agents: agents, Next: page.next}, page.now, nil
}

// agentsPage is what a page says besides its agents.
type agentsPage struct {
	rawNow string
	now    time.Time
	next   *string
}

// readAgentsPage reads one page from r as it arrives, appending its agents to agents, with the
// checks and errors of decoding it whole (ParseAgentsPage): a document that does not decode is
// refused first, then a page without a clock or with an empty cursor, then the first agent that
// fails a check. Each agent is checked as it is read and the first failure kept until the end.
func readAgentsPage(r io.Reader, agents []protocol.AdminAgent) (agentsPage, []protocol.AdminAgent, error) {
	var p agentsPage
	d := strictjson.NewDecoder(r)
	if d.PeekKind() != '{' {
		// Not an object: what decoding it whole says (null decodes, as a page without a clock).
		var whole protocol.AdminAgentsPage
		if err := d.Decode(&whole); err != nil {
			return p, agents, decodeError(err)
		}
		if err := d.End(); err != nil {
			return p, agents, decodeError(err)
		}
		return p, agents, p.check(nil)
	}
	if _, err := d.ReadToken(); err != nil {
		return p, agents, decodeError(err)
	}
	var checkErr error
	for d.PeekKind() != '}' {
		name, err := d.ReadToken()
		if err != nil {
			return p, agents, decodeError(err)
		}
		switch name.String() {
		case "now":
			err = d.Decode(&p.rawNow)
		case "next":
			err = d.Decode(&p.next)
		case "agents":
			if d.PeekKind() != '[' {
				var list []protocol.AdminAgent // null, or the error of another kind
				err = d.Decode(&list)
				agents = append(agents, list...)
				break
			}
			if _, err = d.ReadToken(); err != nil {
				break
			}
			if agents == nil {
				agents = []protocol.AdminAgent{} // [] is not null
			}
			for i := 0; d.PeekKind() != ']' && err == nil; i++ {
				agents = append(agents, protocol.AdminAgent{})
				a := &agents[len(agents)-1]
				if err = d.Decode(a); err == nil && checkErr == nil {
					checkErr = checkAgent(i, a)
				}
			}
			if err == nil {
				_, err = d.ReadToken()
			}
		default:
			if k := name.String(); strings.EqualFold(k, "now") || strings.EqualFold(k, "next") || strings.EqualFold(k, "agents") {
				// Ignored, a mis-cased "next" would end the listing at this page.
				return p, agents, fmt.Errorf("field %q: keys are matched exactly; tenancy spells it %q", k, strings.ToLower(k))
			}
			err = d.SkipValue() // tenancy only adds
		}
		if err != nil {
			return p, agents, decodeError(err)
		}
	}
	if _, err := d.ReadToken(); err != nil {
		return p, agents, decodeError(err)
	}
	if err := d.End(); err != nil {
		return p, agents, decodeError(err)
	}
	return p, agents, p.check(checkErr)
}

// check reads the page's clock and checks its cursor; then an agent's failed check counts.
func (p *agentsPage) check(agentErr error) error {
	if p.rawNow == "" {
		return errors.New(`field "now" is missing: staleness cannot be measured without tenancy's clock`)
	}
	var err error
	if p.now, err = parseTime("now", p.rawNow); err != nil {
		return err
	}
	if p.next != nil && *p.next == "" {
		return errors.New(`field "next": empty cursor (null ends the listing)`)
	}
	return agentErr
}

// checkAgent checks agents[i] of a page.
func checkAgent(i int, a *protocol.AdminAgent) error {
	where := "agents[" + strconv.Itoa(i) + "]"
	if err := checkName(where+".env_id", a.EnvID); err != nil {
		return err
	}
	where += " (" + a.EnvID + ")"
	if a.CheckinIntervalS < 0 {
		return fmt.Errorf("%s.checkin_interval_s: %d is negative", where, a.CheckinIntervalS)
	}
	if a.Attempts < 0 {
		return fmt.Errorf("%s.attempts: %d is negative", where, a.Attempts)
	}
	if err := checkTruth(where, a); err != nil {
		return err
	}
	if err := checkHoldAndDeferral(where, a); err != nil {
		return err
	}
	for _, t := range [...]timeField{{"last_checkin_at", a.LastCheckinAt}, {"desired_at", a.DesiredAt}, {"last_result_at", a.LastResultAt},
		{"next_attempt_at", a.NextAttemptAt}, {"identity_not_after", a.IdentityNotAfter},
		{"deferred_until", a.DeferredUntil}} {
		if err := checkTime(where, t); err != nil {
			return err
		}
	}
	if f := a.LastFailure; f != nil {
		if err := checkTime(where, timeField{"last_failure.at", &f.At}); err != nil {
			return err
		}
	}
	if a.Timer != nil {
		for _, t := range [...]timeField{{"timer.next_elapse", a.Timer.NextElapse}, {"timer.observed_at", a.Timer.ObservedAt}} {
			if err := checkTime(where, t); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkTime(where string, t timeField) error {
	if t.v == nil || *t.v == "" {
		return nil
	}
	_, err := parseTime(where+"."+t.field, *t.v)
	return err
}

// tickIDRE and failureCodeRE: a tick id ends up in a journalctl command fleetctl suggests, a
// failure code in a Prometheus label; both are the agent's own making.
var (
	tickIDRE      = regexp.MustCompile(`^[0-9A-Za-z]{1,32}$`)
	failureCodeRE = regexp.MustCompile(`^[A-Z][A-Z0-9_]{0,63}$`)
)

// checkTruth checks the fields of issue 20 (the next step's evidence, the last failure).
func checkTruth(where string, a *protocol.AdminAgent) error {
	for _, t := range []struct{ field, v string }{{"checkin_tick_id", a.CheckinTickID}, {"result_tick_id", a.ResultTickID}} {
		if t.v != "" && !tickIDRE.MatchString(t.v) {
			return fmt.Errorf("%s.%s: %q is not a tick id (letters and digits, at most 32)", where, t.field, clip.Head(t.v, 40))
		}
	}
	if c := a.LastExitCode; c != nil && (*c < 0 || *c > 255) {
		return fmt.Errorf("%s.last_exit_code: %d is not an exit code (0-255)", where, *c)
	}
	if a.ApplyTimeoutS < 0 {
		return fmt.Errorf("%s.apply_timeout_s: %d is negative", where, a.ApplyTimeoutS)
	}
	if f := a.LastFailure; f != nil {
		switch {
		case f.Sha == "":
			return fmt.Errorf("%s.last_failure.sha: empty", where)
		case !failureCodeRE.MatchString(f.Code):
			return fmt.Errorf("%s.last_failure.code: %q is not a code (upper-case letters, digits, '_')", where, clip.Head(f.Code, 40))
		case f.Attempts < 0:
			return fmt.Errorf("%s.last_failure.attempts: %d is negative", where, f.Attempts)
		case f.At == "":
			return fmt.Errorf("%s.last_failure.at: missing", where)
		}
	}
	return nil
}

// checkHoldAndDeferral checks an agent's hold (issue 22): every field present, times RFC 3339
// with until after since, text as the agent writes it (protocol.CheckSentHoldText): one agent's
// hold fleetctl refused would refuse the whole listing, every other env with it.
func checkHoldAndDeferral(where string, a *protocol.AdminAgent) error {
	h := a.Hold
	if h == nil {
		return nil
	}
	for _, f := range []struct {
		name, v string
		max     int
	}{{"reason", h.Reason, protocol.MaxHoldReason}, {"by", h.By, protocol.MaxHoldBy}} {
		if f.v == "" {
			return fmt.Errorf("%s.hold.%s: missing", where, f.name)
		}
		if err := protocol.CheckSentHoldText(f.v, f.max); err != nil {
			return fmt.Errorf("%s.hold.%s: %w", where, f.name, err)
		}
	}
	since, err := parseTime(where+".hold.since", h.Since)
	if err != nil {
		return err
	}
	until, err := parseTime(where+".hold.until", h.Until)
	if err != nil {
		return err
	}
	if !until.After(since) {
		return fmt.Errorf("%s.hold.until: %s is not after since %s", where, h.Until, h.Since)
	}
	return nil
}

type timeField struct {
	field string
	v     *string
}

// The kit's values: the stricter of install.sh's check (a test holds the two together) and what
// is safe in a root shell and in YAML.
var (
	// kitNameRE: env_id and site, as install.sh's --env and --site (and the ansible role).
	kitNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	// kitVersionRE: install.sh's --version (0.2.0, 0.2.0-rc.1, 0.2.0+deb12, 0.2.0~rc1).
	kitVersionRE = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+([~+-][0-9A-Za-z.~+-]{1,40})?$`)
	// kitBaoAddrRE: install.sh's --bao-addr: https, host and port, at most a '/' after.
	kitBaoAddrRE = regexp.MustCompile(`^https://[A-Za-z0-9.-]+(:[1-9][0-9]{0,4})?/?$`)
)

type kitField struct {
	name, value string
	re          *regexp.Regexp
	optional    bool
	want        string
}

// ParseKit reads POST /v1/admin/backends/{env_id}/kit's answer: the one check of every value
// that reaches a root shell. An absent tenancy_port becomes 443; other optional values stay empty.
func ParseKit(b []byte) (*protocol.KitResponse, error) {
	var k protocol.KitResponse
	if err := decode(b, &k); err != nil {
		return nil, err
	}
	for _, f := range []kitField{
		{"env_id", k.EnvID, kitNameRE, false, "an env id like env-qa-02"},
		{"site", k.Site, kitNameRE, false, "a site name like cbs"},
		{"package_version", k.PackageVersion, kitVersionRE, false, "a release version like 0.2.0"},
		{"tenancy_service", k.TenancyService, nameRE, true, "a ziti service name like monky.tenancy.deploy"},
		{"bao_addr", k.BaoAddr, kitBaoAddrRE, true, "an https address like https://bao.cbs.tikali.net:8200"},
		{"bao_auth_mount", k.BaoAuthMount, nameRE, true, "an auth mount like jwt-tenancy"},
		{"bao_role", k.BaoRole, nameRE, true, "a role name like see-env"},
	} {
		if f.value == "" && f.optional {
			continue
		}
		if !f.re.MatchString(f.value) {
			return nil, fmt.Errorf("%s: %q is not %s", f.name, clip.Head(f.value, 80), f.want)
		}
	}
	if m := kitBaoAddrRE.FindStringSubmatch(k.BaoAddr); m != nil && m[1] != "" {
		if p, _ := strconv.Atoi(m[1][1:]); p > 65535 {
			return nil, fmt.Errorf("bao_addr: %q has a port beyond 65535", k.BaoAddr)
		}
	}
	if k.TenancyPort == 0 {
		k.TenancyPort = 443
	}
	if k.TenancyPort < 1 || k.TenancyPort > 65535 {
		return nil, fmt.Errorf("tenancy_port: %d is not a port (1-65535)", k.TenancyPort)
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
	if k.Identity != "" && k.Identity != "monky-host."+k.EnvID {
		return nil, fmt.Errorf("identity: %q is not monky-host.%s", k.Identity, k.EnvID)
	}
	return &k, nil
}

// decode reads one JSON object strictly (strictjson); a type mismatch names the field.
func decode(b []byte, v any) error {
	return decodeError(strictjson.Unmarshal(b, v))
}

// decodeError says what strictjson found wrong with a document; another error (the answer's
// reader's own) is returned as it is.
func decodeError(err error) error {
	var se *strictjson.Error
	switch {
	case err == nil:
		return nil
	case !errors.As(err, &se):
		return err
	case se.Trailing:
		return errors.New("trailing data after the JSON object")
	case se.Duplicate:
		return fmt.Errorf("field %q: given twice", se.Field)
	case se.Got != "" && se.Field != "":
		return fmt.Errorf("field %q: JSON %s where another type was expected", se.Field, se.Got)
	}
	return fmt.Errorf("not a JSON object: %w", err)
}

func parseTime(field, v string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %q is not an RFC 3339 time", field, clip.Head(v, 40))
	}
	return t, nil
}
