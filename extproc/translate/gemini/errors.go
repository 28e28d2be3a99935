package gemini

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/extproc/translate"
	"github.com/switchyard-ai/switchyard/internal/apierror"
)

// upstreamError translates a non-2xx Gemini answer.
func upstreamError(status int, body []byte, clientModel string) *apierror.Error {
	e := gjson.Get(translate.BytesString(body), "error")
	if !gjson.ValidBytes(body) || !e.IsObject() {
		// Not Gemini's error shape: a proxy or load balancer in between.
		if status < 400 || status > 599 {
			status = http.StatusBadGateway
		}
		return apierror.Server(status, "upstream_error",
			fmt.Sprintf("The upstream provider answered with HTTP status %d.", status))
	}
	return errorFrom(status, e, clientModel)
}

// errorFrom translates Gemini's error object
// {"code","message","status","details"}, as in an error body or an event of
// a failed stream. status is the HTTP status (0 in a stream, where the code
// in the object stands in).
func errorFrom(status int, e gjson.Result, clientModel string) *apierror.Error {
	var code, message, gstatus, details gjson.Result
	e.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "code":
			code = v
		case "message":
			message = v
		case "status":
			gstatus = v
		case "details":
			details = v
		}
		return true
	})
	if status < 400 || status > 599 {
		status = int(code.Int())
		if status < 400 || status > 599 {
			status = http.StatusBadGateway
		}
	}
	g := gstatus.Str
	if g == "" {
		g = canonicalStatus(status)
	}
	out := &apierror.Error{Status: status, Code: strings.ToLower(g), Message: message.Str}
	if out.Message == "" {
		out.Message = fmt.Sprintf("The upstream provider answered with status %s.", g)
	}

	var reason, retryDelay string
	tokenQuota := false
	details.ForEach(func(_, d gjson.Result) bool {
		switch t := d.Get(`@type`).Str; {
		case strings.HasSuffix(t, "google.rpc.ErrorInfo"):
			reason = d.Get("reason").Str
		case strings.HasSuffix(t, "google.rpc.RetryInfo"):
			retryDelay = d.Get("retryDelay").Str
		case strings.HasSuffix(t, "google.rpc.QuotaFailure"):
			d.Get("violations").ForEach(func(_, v gjson.Result) bool {
				m := strings.ToLower(v.Get("quotaMetric").Str + " " + v.Get("quotaId").Str)
				tokenQuota = tokenQuota || strings.Contains(m, "token")
				return true
			})
		}
		return true
	})

	switch {
	case g == "UNAUTHENTICATED" || g == "PERMISSION_DENIED" || reason == "API_KEY_INVALID" || reason == "API_KEY_SERVICE_BLOCKED":
		// The gateway's credential, not the client's key. The upstream
		// message is withheld: it can quote the key.
		return apierror.Server(http.StatusBadGateway, "upstream_authentication_failed",
			"The upstream provider rejected the gateway's credentials. Contact the gateway's administrator.")
	case g == "RESOURCE_EXHAUSTED" || status == http.StatusTooManyRequests:
		out.Status = http.StatusTooManyRequests
		out.Code = "rate_limit_exceeded"
		out.Type = apierror.TypeRequests
		if tokenQuota {
			out.Type = apierror.TypeTokens
		}
		out.RetryAfter = retrySeconds(retryDelay)
	case g == "NOT_FOUND" && strings.Contains(out.Message, "models/"):
		nf := apierror.ModelNotFound(clientModel)
		nf.Status = status
		return nf
	case g == "INVALID_ARGUMENT" || g == "FAILED_PRECONDITION" || g == "OUT_OF_RANGE":
		out.Type = apierror.TypeInvalidRequest
	case status == http.StatusServiceUnavailable:
		out.RetryAfter = retrySeconds(retryDelay)
	}
	return out
}

// retrySeconds turns a protobuf Duration ("37s", "0.5s") into whole seconds
// for retry-after, rounding up so clients never retry early; 0 when absent.
func retrySeconds(d string) int {
	if d == "" {
		return 0
	}
	dur, err := time.ParseDuration(d)
	if err != nil || dur <= 0 {
		return 0
	}
	return int(min(math.Ceil(dur.Seconds()), math.MaxInt32))
}

// canonicalStatus is the google.rpc.Code name Google's HTTP mapping gives a
// status, for error bodies that lack one.
func canonicalStatus(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "INVALID_ARGUMENT"
	case http.StatusUnauthorized:
		return "UNAUTHENTICATED"
	case http.StatusForbidden:
		return "PERMISSION_DENIED"
	case http.StatusNotFound:
		return "NOT_FOUND"
	case http.StatusConflict:
		return "ABORTED"
	case http.StatusTooManyRequests:
		return "RESOURCE_EXHAUSTED"
	case 499:
		return "CANCELLED"
	case http.StatusNotImplemented:
		return "UNIMPLEMENTED"
	case http.StatusServiceUnavailable:
		return "UNAVAILABLE"
	case http.StatusGatewayTimeout:
		return "DEADLINE_EXCEEDED"
	}
	if status >= 500 {
		return "INTERNAL"
	}
	return "FAILED_PRECONDITION"
}

// malformed is the error for a 2xx answer that is not what Gemini sends.
func malformed(what string) *apierror.Error {
	return apierror.Server(http.StatusBadGateway, "upstream_invalid_response",
		"The upstream provider sent a malformed "+what+".")
}

// appendInt appends n in decimal.
func appendInt(dst []byte, n int64) []byte { return strconv.AppendInt(dst, n, 10) }
