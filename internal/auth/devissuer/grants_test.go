package devissuer_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"

	"github.com/sandgate/sandgate/internal/auth/devissuer"
)

func (d *devServer) oauth2Config() oauth2.Config {
	return oauth2.Config{
		ClientID: devissuer.ClientID,
		Scopes:   []string{"openid", "groups", "offline_access"},
		Endpoint: oauth2.Endpoint{
			AuthURL: d.iss.URL() + "/authorize", TokenURL: d.iss.URL() + "/token",
			DeviceAuthURL: d.iss.URL() + "/device_authorization", AuthStyle: oauth2.AuthStyleInParams,
		},
	}
}

// approve signs in on the verification page as a user would: open verification_uri_complete,
// submit the form.
func (d *devServer) approve(t *testing.T, complete string, form url.Values) (int, string) {
	t.Helper()
	resp, err := d.client.Get(complete)
	require.NoError(t, err)
	page, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	u, err := url.Parse(complete)
	require.NoError(t, err)
	require.Contains(t, string(page), `value="`+u.Query().Get("user_code")+`"`, "the page shows the code")
	resp, err = d.client.PostForm(d.iss.URL()+"/device", form)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp.StatusCode, string(body)
}

// TestDeviceFlowWithOAuth2Client: the device authorization grant as golang.org/x/oauth2
// drives it (RFC 8628): pending until the user signs in on the verification page, then a
// token the gateway's authenticator accepts, once.
func TestDeviceFlowWithOAuth2Client(t *testing.T) {
	t.Parallel()
	d := startDevServer(t)
	a := d.authenticator(t)
	conf := d.oauth2Config()
	ctx := context.WithValue(t.Context(), oauth2.HTTPClient, d.client)

	da, err := conf.DeviceAuth(ctx)
	require.NoError(t, err)
	require.Regexp(t, `^[B-Z]{4}-[B-Z]{4}$`, da.UserCode)
	require.Equal(t, d.iss.URL()+"/device", da.VerificationURI)
	require.Equal(t, int64(1), da.Interval)

	status, body := d.exchange(t, url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:device_code"}, "device_code": {da.DeviceCode}, "client_id": {devissuer.ClientID}})
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "authorization_pending", body["error"])
	status, body = d.exchange(t, url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:device_code"}, "device_code": {da.DeviceCode}, "client_id": {devissuer.ClientID}})
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "slow_down", body["error"], "polled again at once")

	// A user types the code in another case, without its dash.
	code, page := d.approve(t, da.VerificationURIComplete, url.Values{"user_code": {strings.ToLower(strings.ReplaceAll(da.UserCode, "-", ""))}, "sub": {"erin"}, "groups": {"dev, ml"}})
	require.Equal(t, http.StatusOK, code, page)
	require.Contains(t, page, "Return to your terminal")

	tok, err := conf.DeviceAccessToken(ctx, da)
	require.NoError(t, err)
	p, err := a.Authenticate(t.Context(), tok.AccessToken)
	require.NoError(t, err)
	require.Equal(t, "erin", p.Username)
	require.Equal(t, []string{"dev", "ml"}, p.Groups)
	require.NotEmpty(t, tok.Extra("id_token"))
	require.NotEmpty(t, tok.RefreshToken)

	status, body = d.exchange(t, url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:device_code"}, "device_code": {da.DeviceCode}, "client_id": {devissuer.ClientID}})
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "invalid_grant", body["error"], "a device code is spent once")
}

func TestDeviceFlowErrors(t *testing.T) {
	t.Parallel()
	var clock atomicTime
	clock.set(time.Now())
	d := startDevServer(t, func(i *devissuer.Issuer) {
		devissuer.SetClock(i, clock.get)
		i.RefuseGroups([]string{"admins"})
	})
	conf := d.oauth2Config()
	ctx := context.WithValue(t.Context(), oauth2.HTTPClient, d.client)

	resp, err := d.client.PostForm(d.iss.URL()+"/device_authorization", url.Values{"client_id": {"other"}})
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "unknown client")

	da, err := conf.DeviceAuth(ctx)
	require.NoError(t, err)
	status, _ := d.approve(t, da.VerificationURIComplete, url.Values{"user_code": {"BBBB-BBBB"}, "sub": {"x"}})
	require.Equal(t, http.StatusBadRequest, status, "a wrong code")
	status, body := d.approve(t, da.VerificationURIComplete, url.Values{"user_code": {da.UserCode}, "sub": {"mallory"}, "groups": {"admins"}})
	require.Equal(t, http.StatusForbidden, status)
	require.Contains(t, body, "--allow-admin")

	clock.set(clock.get().Add(devissuer.DeviceCodeTTL + time.Second))
	status, _ = d.approve(t, da.VerificationURIComplete, url.Values{"user_code": {da.UserCode}, "sub": {"late"}})
	require.Equal(t, http.StatusBadRequest, status, "an expired code")
	st, tb := d.exchange(t, url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:device_code"}, "device_code": {da.DeviceCode}, "client_id": {devissuer.ClientID}})
	require.Equal(t, http.StatusBadRequest, st)
	require.Equal(t, "expired_token", tb["error"])
}

// TestRefreshToken: a refresh token gives new tokens for the same user (oauth2's
// TokenSource refreshes an expired token with it); it is no bearer token for the gateway,
// expires, and cannot carry a group the sign-in refuses.
func TestRefreshToken(t *testing.T) {
	t.Parallel()
	var clock atomicTime
	clock.set(time.Now())
	d := startDevServer(t, func(i *devissuer.Issuer) { devissuer.SetClock(i, clock.get) })
	a := d.authenticator(t)
	conf := d.oauth2Config()
	conf.RedirectURL = redirectURI
	ctx := context.WithValue(t.Context(), oauth2.HTTPClient, d.client)

	verifier := oauth2.GenerateVerifier()
	authURL, err := url.Parse(conf.AuthCodeURL("s", oauth2.S256ChallengeOption(verifier)))
	require.NoError(t, err)
	loc := d.signIn(t, authURL.Query(), url.Values{"sub": {"frank"}, "groups": {"dev"}, "email": {"frank@example.test"}})
	tok, err := conf.Exchange(ctx, loc.Query().Get("code"), oauth2.VerifierOption(verifier))
	require.NoError(t, err)
	require.NotEmpty(t, tok.RefreshToken)

	_, err = a.Authenticate(t.Context(), tok.RefreshToken)
	require.Error(t, err, "a refresh token is no bearer token for the gateway")

	expired := &oauth2.Token{AccessToken: tok.AccessToken, RefreshToken: tok.RefreshToken, Expiry: time.Now().Add(-time.Minute)}
	fresh, err := conf.TokenSource(ctx, expired).Token()
	require.NoError(t, err)
	require.NotEqual(t, tok.AccessToken, fresh.AccessToken)
	require.NotEmpty(t, fresh.Extra("id_token"))
	p, err := a.Authenticate(t.Context(), fresh.AccessToken)
	require.NoError(t, err)
	require.Equal(t, "frank", p.Username)
	require.Equal(t, []string{"dev"}, p.Groups)
	require.Equal(t, "frank@example.test", p.Email)

	for name, form := range map[string]url.Values{
		"garbage":      {"grant_type": {"refresh_token"}, "refresh_token": {"nope"}},
		"access token": {"grant_type": {"refresh_token"}, "refresh_token": {tok.AccessToken}},
		"other client": {"grant_type": {"refresh_token"}, "refresh_token": {fresh.RefreshToken}, "client_id": {"other"}},
	} {
		status, body := d.exchange(t, form)
		require.Equal(t, http.StatusBadRequest, status, name)
		require.Equal(t, "invalid_grant", body["error"], name)
	}

	clock.set(clock.get().Add(devissuer.RefreshTTL + time.Hour))
	status, body := d.exchange(t, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {fresh.RefreshToken}})
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "invalid_grant", body["error"], "expired: %v", body)
	require.Contains(t, body["error_description"], "expired")

	// A refresh token of a group the sign-in refuses now is refused too.
	clock.set(time.Now())
	d.iss.RefuseGroups([]string{"dev"})
	status, body = d.exchange(t, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok.RefreshToken}})
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, body["error_description"], "administrator group")
}
