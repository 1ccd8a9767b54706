// Command ticklowerbound does a converged tick's outside work and nothing else, for the process
// benchmark's lower bound: read the config, state.json and the token, check in with tenancy,
// run `docker compose ps` and read its output, and report. No judgement, no lock, no journal, no
// metrics, no redaction: what any Go program doing this work would cost on the same machine, so
// the agent's own share of a tick's CPU is the difference.
//
//	ticklowerbound version
//	ticklowerbound TENANCY_URL DOCKER CONFIG STATE TOKEN
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "version" {
		fmt.Println("ticklowerbound")
		return
	}
	if len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: ticklowerbound version | ticklowerbound TENANCY_URL DOCKER CONFIG STATE TOKEN")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5]); err != nil {
		fmt.Fprintln(os.Stderr, "ticklowerbound:", err)
		os.Exit(1)
	}
}

func run(url, docker, cfgPath, statePath, tokenPath string) error {
	if _, err := os.ReadFile(cfgPath); err != nil {
		return err
	}
	raw, err := os.ReadFile(statePath)
	if err != nil {
		return err
	}
	var st struct {
		EnvID      string `json:"env_id"`
		AppliedSha string `json:"applied_sha"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return err
	}
	tok, err := os.ReadFile(tokenPath)
	if err != nil {
		return err
	}
	bearer := "Bearer " + strings.TrimSpace(string(tok))
	var answer struct {
		Action string `json:"action"`
	}
	if err := post(url+"/v1/agent/checkin", bearer, map[string]any{"env_id": st.EnvID, "applied_sha": st.AppliedSha}, &answer); err != nil {
		return err
	}
	cmd := exec.Command(docker, "compose", "-p", "monky-"+st.EnvID, "ps", "-a", "--format", "json")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "DOCKER_CONFIG=" + os.TempDir()}
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %v: %s", docker, err, stderr.String())
	}
	type container struct {
		Service, Name, State, Health string
	}
	var cs []container
	for dec := json.NewDecoder(&out); dec.More(); {
		var c container
		if err := dec.Decode(&c); err != nil {
			return err
		}
		cs = append(cs, c)
	}
	return post(url+"/v1/agent/report", bearer, map[string]any{
		"env_id": st.EnvID, "sha": st.AppliedSha, "result": "applied", "containers": cs,
	}, nil)
}

// post sends body as JSON and decodes the answer into into (nil: read and dropped).
func post(url, bearer string, body, into any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", bearer)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s: %s", url, resp.Status, b)
	}
	if into == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	return json.NewDecoder(resp.Body).Decode(into)
}
