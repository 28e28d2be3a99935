// Package admin owns the operator's HTTP API: the same key operations as
// `switchyard keys` (create, list, show, revoke, rotate, set-tier), live
// routing changes, and the gateway's metrics in the Prometheus text format.
//
// It is served on its own listener, loopback by default, never on the
// public one, and every request must carry the admin token
// (Authorization: Bearer <token>); requests without it get 401 in the
// OpenAI error shape before anything else happens, unknown paths included.
//
//	GET  /admin/v1/keys                    list keys (never their secrets)
//	POST /admin/v1/keys                    create: {name, tier, rpm?, tpm?, models?, monthly_budget_usd?, budget_alert_ratio?} -> the key with its secret
//	GET  /admin/v1/keys/{id}               show one key
//	POST /admin/v1/keys/{id}/revoke        revoke
//	POST /admin/v1/keys/{id}/rotate        rotate: {grace: "24h"} -> the new key with its secret
//	POST /admin/v1/keys/{id}/set-tier      {tier, rpm?, tpm?, models?, monthly_budget_usd?, budget_alert_ratio?}
//	GET  /admin/v1/usage                   ?key=ID&since=YYYY-MM-DD&until=YYYY-MM-DD&format=json|csv (Options.Usage)
//	GET  /metrics                          Prometheus text
//
// and, with Options.Routing, live routing changes (routing.go): a model's
// providers, weights, priorities, routing policy and first-byte timeout,
// and draining a provider.
//
// Keys are named by ID only: a secret in a URL ends up in logs.
package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/apierror"
	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/keys"
	"github.com/switchyard-ai/switchyard/internal/usage"
)

// KeyStore is the key management the admin API needs, declared here, its
// consumer; *keys.SQLiteStore implements it (keystest checks implementations).
type KeyStore interface {
	Issue(ctx context.Context, sp keys.Spec) (string, keys.Key, error)
	List(ctx context.Context) ([]keys.Key, error)
	Get(ctx context.Context, idOrSecret string) (keys.Key, error)
	Revoke(ctx context.Context, idOrSecret string) error
	Rotate(ctx context.Context, idOrSecret string, grace time.Duration) (string, keys.Key, error)
	SetTier(ctx context.Context, idOrSecret, tier string, rpm, tpm int64) (keys.Key, error)
	SetModels(ctx context.Context, idOrSecret string, models []string) (keys.Key, error)
	SetBudget(ctx context.Context, idOrSecret string, budget int64, alertRatio float64) (keys.Key, error)
}

// Options configure the admin API.
type Options struct {
	Keys KeyStore
	// Token is the admin bearer token. Required: an empty token would let
	// anyone in.
	Token string
	// Config returns the configuration in force, whose tiers and models new
	// settings are checked against.
	Config func() *config.Config
	// Metrics writes the gateway's metrics in the Prometheus text format.
	Metrics func(w io.Writer) error
	// Changed, if not nil, is called after every successful change, so the
	// gateway can drop its key cache at once rather than at the next poll.
	Changed func()
	// Routing, if not nil, serves the routing endpoints (routing.go).
	Routing Routing
	// Usage, if not nil, serves GET /admin/v1/usage.
	Usage  usage.Reader
	Logger *slog.Logger
}

// MinTokenLen is the shortest admin token accepted: anything shorter is
// guessable.
const MinTokenLen = 16

// DefaultGrace is rotate's grace period when the request gives none.
const DefaultGrace = 24 * time.Hour

// New returns the admin API handler.
func New(opts Options) (http.Handler, error) {
	if len(opts.Token) < MinTokenLen {
		return nil, fmt.Errorf("admin: the admin token must be at least %d characters", MinTokenLen)
	}
	if opts.Keys == nil || opts.Config == nil {
		return nil, errors.New("admin: Keys and Config are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	a := &api{opts: opts, token: sha256.Sum256([]byte(opts.Token))}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/v1/keys", a.list)
	mux.HandleFunc("POST /admin/v1/keys", a.create)
	mux.HandleFunc("GET /admin/v1/keys/{id}", a.show)
	mux.HandleFunc("POST /admin/v1/keys/{id}/revoke", a.revoke)
	mux.HandleFunc("POST /admin/v1/keys/{id}/rotate", a.rotate)
	mux.HandleFunc("POST /admin/v1/keys/{id}/set-tier", a.setTier)
	mux.HandleFunc("GET /metrics", a.metrics)
	if opts.Usage != nil {
		mux.HandleFunc("GET /admin/v1/usage", a.usage)
	}
	a.routes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { apierror.NotFound(r.URL.Path).Write(w) })
	return a.authenticate(mux), nil
}

type api struct {
	opts  Options
	token [sha256.Size]byte
}

// maxBody bounds request bodies; the largest is a model allow-list.
const maxBody = 1 << 20

var errUnauthorized = &apierror.Error{Status: http.StatusUnauthorized, Code: "invalid_admin_token",
	Message: "This is the Switchyard admin API. Provide the admin token in an Authorization header using Bearer auth (i.e. Authorization: Bearer ADMIN_TOKEN)."}

// authenticate refuses every request without the admin token, comparing
// digests in constant time.
func (a *api) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		got := sha256.Sum256([]byte(strings.TrimSpace(token)))
		if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare(got[:], a.token[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="switchyard-admin"`)
			errUnauthorized.Write(w)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// keyJSON is a key as the admin API shows it.
type keyJSON struct {
	ID         string   `json:"id"`
	Object     string   `json:"object"`
	Prefix     string   `json:"prefix"`
	Name       string   `json:"name"`
	Tier       string   `json:"tier"`
	Status     string   `json:"status"`
	CreatedAt  int64    `json:"created_at"`
	RevokedAt  *int64   `json:"revoked_at"`
	ExpiresAt  *int64   `json:"expires_at"`
	ReplacedBy *string  `json:"replaced_by"`
	LimitID    string   `json:"limit_id"`
	RPM        *int64   `json:"rpm"`
	TPM        *int64   `json:"tpm"`
	Models     []string `json:"models"`
	// MonthlyBudgetUSD is null without a budget; BudgetAlertRatio is the
	// threshold in force (the default when the key sets none).
	MonthlyBudgetUSD *json.Number `json:"monthly_budget_usd"`
	BudgetAlertRatio float64      `json:"budget_alert_ratio"`
	// Secret is set only in the answers that issue a key.
	Secret string `json:"secret,omitempty"`
}

// Status is a key's state for listings: active, revoked, expired, or
// "rotated" (replaced, still working until its grace period ends).
func Status(k keys.Key, now time.Time) string {
	switch {
	case k.Revoked():
		return "revoked"
	case k.Expired(now):
		return "expired"
	case k.ReplacedBy != "":
		return "rotated"
	}
	return "active"
}

func toJSON(k keys.Key) keyJSON {
	unix := func(t time.Time) *int64 {
		if t.IsZero() {
			return nil
		}
		v := t.Unix()
		return &v
	}
	positive := func(v int64) *int64 {
		if v <= 0 {
			return nil
		}
		return &v
	}
	j := keyJSON{ID: k.ID, Object: "api_key", Prefix: k.Prefix, Name: k.Name, Tier: k.Tier,
		Status: Status(k, time.Now()), CreatedAt: k.CreatedAt.Unix(), RevokedAt: unix(k.RevokedAt),
		ExpiresAt: unix(k.ExpiresAt), LimitID: k.LimitID(), RPM: positive(k.RPM), TPM: positive(k.TPM), Models: k.Models}
	if k.ReplacedBy != "" {
		j.ReplacedBy = &k.ReplacedBy
	}
	if k.MonthlyBudget > 0 {
		b := json.Number(usage.USD(k.MonthlyBudget))
		j.MonthlyBudgetUSD = &b
	}
	j.BudgetAlertRatio = k.AlertRatio()
	return j
}

func (a *api) list(w http.ResponseWriter, r *http.Request) {
	ks, err := a.opts.Keys.List(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := struct {
		Object string    `json:"object"`
		Data   []keyJSON `json:"data"`
	}{Object: "list", Data: make([]keyJSON, 0, len(ks))}
	for _, k := range ks {
		out.Data = append(out.Data, toJSON(k))
	}
	writeJSON(w, http.StatusOK, out)
}

// keySettings is the body of create and set-tier.
type keySettings struct {
	Name   string    `json:"name"`
	Tier   string    `json:"tier"`
	RPM    int64     `json:"rpm"`
	TPM    int64     `json:"tpm"`
	Models *[]string `json:"models"` // absent: unchanged (set-tier) or all models
	// MonthlyBudgetUSD: absent, unchanged (set-tier) or none; 0 removes it.
	MonthlyBudgetUSD *float64 `json:"monthly_budget_usd"`
	BudgetAlertRatio *float64 `json:"budget_alert_ratio"`
}

// budget reads the settings' budget into sp, reporting whether any was given.
func (in *keySettings) budget(sp *keys.Spec) (bool, error) {
	if in.MonthlyBudgetUSD != nil {
		m, err := BudgetMicros(*in.MonthlyBudgetUSD)
		if err != nil {
			return false, err
		}
		sp.MonthlyBudget = m
	}
	if in.BudgetAlertRatio != nil {
		sp.BudgetAlertRatio = *in.BudgetAlertRatio
	}
	return in.MonthlyBudgetUSD != nil || in.BudgetAlertRatio != nil, nil
}

// BudgetMicros converts a monthly budget in US dollars to micro-dollars.
func BudgetMicros(usd float64) (int64, error) {
	if !(usd >= 0 && usd <= keys.MaxMonthlyBudget/1e6) {
		return 0, fmt.Errorf("monthly_budget_usd must be between 0 (none) and %d dollars", int64(keys.MaxMonthlyBudget/1e6))
	}
	return int64(math.Round(usd * 1e6)), nil
}

func (a *api) create(w http.ResponseWriter, r *http.Request) {
	var in keySettings
	if !readJSON(w, r, &in) {
		return
	}
	sp := keys.Spec{Name: in.Name, Tier: in.Tier, RPM: in.RPM, TPM: in.TPM}
	if in.Models != nil {
		sp.Models = *in.Models
	}
	if _, err := in.budget(&sp); err != nil {
		badRequest(w, "monthly_budget_usd", err)
		return
	}
	if err := CheckSpec(a.opts.Config(), sp); err != nil {
		badRequest(w, "", err)
		return
	}
	secret, k, err := a.opts.Keys.Issue(r.Context(), sp)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.changed(r, "create", k.ID)
	j := toJSON(k)
	j.Secret = secret
	writeJSON(w, http.StatusCreated, j)
}

func (a *api) show(w http.ResponseWriter, r *http.Request) {
	k, ok := a.key(w, r)
	if ok {
		writeJSON(w, http.StatusOK, toJSON(k))
	}
}

func (a *api) revoke(w http.ResponseWriter, r *http.Request) {
	k, ok := a.key(w, r)
	if !ok {
		return
	}
	if err := a.opts.Keys.Revoke(r.Context(), k.ID); err != nil {
		a.fail(w, r, err)
		return
	}
	a.changed(r, "revoke", k.ID)
	k, err := a.opts.Keys.Get(r.Context(), k.ID)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toJSON(k))
}

func (a *api) rotate(w http.ResponseWriter, r *http.Request) {
	k, ok := a.key(w, r)
	if !ok {
		return
	}
	var in struct {
		Grace *string `json:"grace"`
	}
	if r.ContentLength != 0 && !readJSON(w, r, &in) {
		return
	}
	grace := DefaultGrace
	if in.Grace != nil {
		d, err := time.ParseDuration(*in.Grace)
		if err != nil {
			badRequest(w, "grace", fmt.Errorf("grace must be a duration such as \"24h\" or \"0s\": %w", err))
			return
		}
		grace = d
	}
	secret, nk, err := a.opts.Keys.Rotate(r.Context(), k.ID, grace)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.changed(r, "rotate", k.ID)
	old, err := a.opts.Keys.Get(r.Context(), k.ID)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	j := toJSON(nk)
	j.Secret = secret
	writeJSON(w, http.StatusOK, struct {
		keyJSON
		Replaces keyJSON `json:"replaces"`
	}{j, toJSON(old)})
}

func (a *api) setTier(w http.ResponseWriter, r *http.Request) {
	k, ok := a.key(w, r)
	if !ok {
		return
	}
	var in keySettings
	if !readJSON(w, r, &in) {
		return
	}
	sp := keys.Spec{Name: k.Name, Tier: in.Tier, RPM: in.RPM, TPM: in.TPM, Models: k.Models,
		MonthlyBudget: k.MonthlyBudget, BudgetAlertRatio: k.BudgetAlertRatio}
	if in.Models != nil {
		sp.Models = *in.Models
	}
	setBudget, err := in.budget(&sp)
	if err != nil {
		badRequest(w, "monthly_budget_usd", err)
		return
	}
	if err := CheckSpec(a.opts.Config(), sp); err != nil {
		badRequest(w, "", err)
		return
	}
	k, err = a.opts.Keys.SetTier(r.Context(), k.ID, sp.Tier, sp.RPM, sp.TPM)
	if err == nil && in.Models != nil {
		k, err = a.opts.Keys.SetModels(r.Context(), k.ID, sp.Models)
	}
	if err == nil && setBudget {
		k, err = a.opts.Keys.SetBudget(r.Context(), k.ID, sp.MonthlyBudget, sp.BudgetAlertRatio)
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.changed(r, "set-tier", k.ID)
	writeJSON(w, http.StatusOK, toJSON(k))
}

// usage answers GET /admin/v1/usage: the daily rows of one key (key, by
// ID) or of every key, between since and until (days, inclusive, UTC), as
// JSON or CSV.
func (a *api) usage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	format := q.Get("format")
	switch format {
	case "":
		format = usage.FormatJSON
	case usage.FormatJSON, usage.FormatCSV:
	default:
		badRequest(w, "format", fmt.Errorf("format must be %q or %q", usage.FormatJSON, usage.FormatCSV))
		return
	}
	uq := usage.Query{KeyID: q.Get("key"), Since: q.Get("since"), Until: q.Get("until")}
	if strings.HasPrefix(uq.KeyID, "sk-") {
		badRequest(w, "key", errors.New("name keys by their ID (key_…) in URLs, never by their secret"))
		return
	}
	if err := uq.Validate(); err != nil {
		badRequest(w, "since", err)
		return
	}
	rows, err := a.opts.Usage.Query(r.Context(), uq)
	if err != nil {
		a.opts.Logger.Error("admin: usage store", "error", err)
		apierror.Server(http.StatusInternalServerError, "server_error", "The usage store failed.").Write(w)
		return
	}
	if format == usage.FormatCSV {
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	_ = usage.WriteRows(w, format, rows)
}

func (a *api) metrics(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	if a.opts.Metrics != nil {
		_ = a.opts.Metrics(w)
	}
}

// key loads the key the path names by ID.
func (a *api) key(w http.ResponseWriter, r *http.Request) (keys.Key, bool) {
	id := r.PathValue("id")
	if strings.HasPrefix(id, "sk-") {
		badRequest(w, "id", errors.New("name keys by their ID (key_…) in URLs, never by their secret"))
		return keys.Key{}, false
	}
	k, err := a.opts.Keys.Get(r.Context(), id)
	if err != nil {
		a.fail(w, r, err)
		return keys.Key{}, false
	}
	return k, true
}

func (a *api) changed(r *http.Request, op, id string) {
	a.opts.Logger.Info("admin: key changed", "op", op, "key_id", id, "remote", r.RemoteAddr)
	if a.opts.Changed != nil {
		a.opts.Changed()
	}
}

// fail answers a store error: 404 for an unknown key, 400 for a refused
// change, 500 (logged, not shown) for anything else.
func (a *api) fail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, keys.ErrNotFound):
		(&apierror.Error{Status: http.StatusNotFound, Code: "key_not_found", Param: "id",
			Message: fmt.Sprintf("No key %q.", r.PathValue("id"))}).Write(w)
	case errors.Is(err, keys.ErrInvalid):
		badRequest(w, "", err)
	default:
		a.opts.Logger.Error("admin: key store", "error", err)
		apierror.Server(http.StatusInternalServerError, "server_error", "The key store failed.").Write(w)
	}
}

func badRequest(w http.ResponseWriter, param string, err error) {
	(&apierror.Error{Status: http.StatusBadRequest, Code: "invalid_value", Param: param, Message: err.Error()}).Write(w)
}

func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		badRequest(w, "", fmt.Errorf("invalid JSON body: %w", err))
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		apierror.Server(http.StatusInternalServerError, "server_error", "Encoding the answer failed.").Write(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// CheckSpec checks key settings against the configuration: the tier must
// exist; a tier without a limit of its own (enterprise) needs the key's;
// custom limits must be positive; allow-listed models must be served.
// The CLI and the admin API both use it, so they accept the same keys.
func CheckSpec(cfg *config.Config, sp keys.Spec) error {
	t, ok := cfg.Tiers[sp.Tier]
	if !ok {
		names := make([]string, 0, len(cfg.Tiers))
		for n := range cfg.Tiers {
			names = append(names, n)
		}
		slices.Sort(names)
		return fmt.Errorf("unknown tier %q (have %s)", sp.Tier, strings.Join(names, ", "))
	}
	if sp.RPM < 0 || sp.TPM < 0 {
		return errors.New("rpm and tpm must not be negative")
	}
	if t.RPM == 0 && sp.RPM == 0 || t.TPM == 0 && sp.TPM == 0 {
		return fmt.Errorf("tier %q has no limits of its own: give the key its rpm and tpm", sp.Tier)
	}
	for _, m := range sp.Models {
		if !slices.ContainsFunc(cfg.Models, func(cm config.Model) bool { return cm.ID == m }) {
			return fmt.Errorf("model %q is not served by this gateway", m)
		}
	}
	return nil
}
