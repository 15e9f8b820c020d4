package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate/pkg/client"
)

// sessionIDPattern is a session id as the API writes it (its SessionID parameter).
var sessionIDPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// allSessions lists every session of the caller (all pages), of profile when not "".
func allSessions(ctx context.Context, c *client.Client, params client.ListSessionsParams) ([]client.Session, error) {
	var sessions []client.Session
	for {
		page, err := c.Sessions(ctx, &params)
		if err != nil {
			return nil, err
		}
		sessions = append(sessions, page.Sessions...)
		if page.NextCursor == "" {
			return sessions, nil
		}
		params.Cursor = &page.NextCursor
	}
}

// resolveSession turns a session reference into the id the API takes: an id (32 hex
// digits) and "default" are themselves; anything else is the name of one of the caller's
// sessions (of profile, when not ""). No session of that name, or more than one, is an
// error that says so (listing the ids to choose from).
func resolveSession(ctx context.Context, c *client.Client, ref, profile string) (string, error) {
	if ref == "default" || sessionIDPattern.MatchString(ref) {
		return ref, nil
	}
	params := client.ListSessionsParams{}
	if profile != "" {
		params.Profile = &profile
	}
	sessions, err := allSessions(ctx, c, params)
	if err != nil {
		return "", fmt.Errorf("looking up session %q by name: %w", ref, err)
	}
	var found []string
	for _, s := range sessions {
		if s.Name != nil && *s.Name == ref {
			found = append(found, s.Id)
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("no session named %q (a session is named by its id, 32 hex digits, or its name; 'sandgate sessions ls' lists yours)", ref)
	case 1:
		return found[0], nil
	default:
		return "", fmt.Errorf("%d sessions are named %q: name one by its id: %s", len(found), ref, strings.Join(found, ", "))
	}
}

// completeSessions completes a SESSION argument with the ids and names of the caller's
// sessions (each id described by its name and profile). Nothing is offered when the
// gateway cannot be asked (not signed in): completion never prompts.
func (a *app) completeSessions(cmd *cobra.Command, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	c, err := a.client(cmd.Context())
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	sessions, err := allSessions(cmd.Context(), c, client.ListSessionsParams{})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	seen := map[string]bool{}
	for _, s := range sessions {
		name := orDash(s.Name)
		if strings.HasPrefix(s.Id, toComplete) {
			out = append(out, cobra.CompletionWithDesc(s.Id, name+" ("+s.Profile+")"))
		}
		if s.Name != nil && *s.Name != "" && !seen[*s.Name] && strings.HasPrefix(*s.Name, toComplete) && !strings.ContainsAny(*s.Name, " \t\n") {
			seen[*s.Name] = true
			out = append(out, cobra.CompletionWithDesc(*s.Name, s.Id))
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// sessionArgs completes the first argument (or every one, with many) as a session.
func (a *app) sessionArgs(many bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 && !many {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return a.completeSessions(cmd, toComplete)
	}
}
