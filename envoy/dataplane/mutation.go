package dataplane

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	mutationrulesv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

type mutationOp int

const (
	opSet mutationOp = iota
	opAppend
	opRemove
)

type checkResult int

const (
	checkOK checkResult = iota
	checkIgnore
	checkFail
)

// mutationChecker is Envoy's HeaderMutationRules checker. With no rules it
// allows every change except to host, :authority, :scheme, :method and
// x-envoy-* headers, which it drops silently; :path may change.
type mutationChecker struct {
	allowAllRouting bool
	allowEnvoy      bool
	disallowSystem  bool
	disallowAll     bool
	disallowIsError bool
	allowExpr       *regexp.Regexp
	disallowExpr    *regexp.Regexp
}

func newMutationChecker(r *mutationrulesv3.HeaderMutationRules) (*mutationChecker, error) {
	c := &mutationChecker{
		allowAllRouting: r.GetAllowAllRouting().GetValue(),
		allowEnvoy:      r.GetAllowEnvoy().GetValue(),
		disallowSystem:  r.GetDisallowSystem().GetValue(),
		disallowAll:     r.GetDisallowAll().GetValue(),
		disallowIsError: r.GetDisallowIsError().GetValue(),
	}
	var err error
	if r.GetAllowExpression() != nil {
		if c.allowExpr, err = compileFullRegex(r.GetAllowExpression().GetRegex()); err != nil {
			return nil, fmt.Errorf("mutation_rules.allow_expression: %w", err)
		}
	}
	if r.GetDisallowExpression() != nil {
		if c.disallowExpr, err = compileFullRegex(r.GetDisallowExpression().GetRegex()); err != nil {
			return nil, fmt.Errorf("mutation_rules.disallow_expression: %w", err)
		}
	}
	return c, nil
}

// permissiveChecker is the fixed rule set Envoy uses for the headers of an
// immediate response, so a processor can build any error reply.
var permissiveChecker = &mutationChecker{allowAllRouting: true, allowEnvoy: true}

func (c *mutationChecker) check(op mutationOp, name, value string) checkResult {
	// System headers and host can never be removed, whatever the rules say.
	if op == opRemove && (strings.HasPrefix(name, ":") || name == "host") {
		return checkIgnore
	}
	if op != opRemove && !validMutationValue(name, value) {
		return checkFail
	}
	if c.allowed(name) {
		return checkOK
	}
	if c.disallowIsError {
		return checkFail
	}
	return checkIgnore
}

func (c *mutationChecker) allowed(name string) bool {
	switch {
	case c.disallowExpr != nil && c.disallowExpr.MatchString(name):
		return false
	case c.allowExpr != nil && c.allowExpr.MatchString(name):
		return true
	case c.disallowAll:
		return false
	case !c.allowAllRouting && (name == "host" || name == hdrAuthority || name == hdrMethod || name == hdrScheme):
		return false
	case c.disallowSystem && strings.HasPrefix(name, ":"):
		return false
	case !c.allowEnvoy && strings.HasPrefix(name, "x-envoy"):
		return false
	}
	return true
}

// validMutationValue applies the value checks Envoy makes before any rule.
func validMutationValue(name, value string) bool {
	if name == hdrStatus {
		code, err := strconv.Atoi(value)
		return err == nil && code >= 200 && code <= 599
	}
	return true
}

// errMutation marks a header mutation Envoy rejects with a 500 local reply.
var errMutation = errors.New("invalid header mutation")

// applyHeaderMutation applies m to h with Envoy's semantics. replacing is
// true for a CONTINUE_AND_REPLACE reply, which may also change :method.
// warn, when non-nil, is told about likely processor mistakes.
func applyHeaderMutation(h *headerMap, m *extprocv3.HeaderMutation, replacing bool, c *mutationChecker, warn func(string, ...any)) error {
	for _, name := range m.GetRemoveHeaders() {
		if !validHeaderName(name) {
			return fmt.Errorf("%w: remove_headers %q", errMutation, name)
		}
		name = strings.ToLower(name)
		switch c.check(opRemove, name, "") {
		case checkOK:
			h.del(name)
		case checkFail:
			return fmt.Errorf("%w: may not remove %s", errMutation, name)
		}
	}
	// The values become strings in one block (a mutation sets several
	// headers on every request), not one allocation each.
	var block strings.Builder
	n := 0
	for _, sh := range m.GetSetHeaders() {
		n += len(sh.GetHeader().GetRawValue())
	}
	block.Grow(n)
	for _, sh := range m.GetSetHeaders() {
		block.Write(sh.GetHeader().GetRawValue())
	}
	values := block.String()
	for _, sh := range m.GetSetHeaders() {
		hv := sh.GetHeader()
		if hv == nil {
			continue
		}
		// Envoy reads raw_value only: a value in the string field is lost.
		value := values[:len(hv.GetRawValue())]
		values = values[len(value):]
		if hv.GetValue() != "" && len(hv.GetRawValue()) > 0 {
			return fmt.Errorf("%w: %s sets both value and raw_value", errMutation, hv.GetKey())
		}
		if value == "" && hv.GetValue() != "" && warn != nil {
			warn("ext_proc header mutation uses HeaderValue.value; Envoy reads raw_value, so the value is empty", "header", hv.GetKey())
		}
		if !validHeaderName(hv.GetKey()) || !validHeaderValue(value) {
			return fmt.Errorf("%w: invalid set_headers entry %q", errMutation, hv.GetKey())
		}
		name := strings.ToLower(hv.GetKey())
		exists := false
		if _, ok := h.get(name); ok {
			exists = true
		}
		var appendMode bool
		op := opSet
		// APPEND_IF_EXISTS_OR_ADD is the enum's zero value, so Envoy can only
		// tell it was chosen when append_action is non-zero; at zero the
		// deprecated append field decides, and it defaults to false here.
		switch sh.GetAppendAction() {
		case corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD:
			//lint:ignore SA1019 Envoy still honours this deprecated field, so the data plane reads it as Envoy does
			appendMode = sh.GetAppend().GetValue()
			if appendMode && exists {
				op = opAppend
			}
		case corev3.HeaderValueOption_ADD_IF_ABSENT:
			if exists {
				continue
			}
			appendMode = true
		case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD:
		case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS:
			if !exists {
				continue
			}
		default:
			return fmt.Errorf("%w: unknown append_action %d", errMutation, sh.GetAppendAction())
		}
		res := c.check(op, name, value)
		if replacing && name == hdrMethod {
			res = checkOK
		}
		switch res {
		case checkIgnore:
			continue
		case checkFail:
			return fmt.Errorf("%w: may not set %s", errMutation, name)
		}
		if appendMode {
			h.add(name, value)
		} else {
			h.set(name, value)
		}
	}
	return nil
}

// applyHeaderOptions applies route-level headers_to_add (static values), whose
// append default is the opposite of ext_proc's: APPEND_IF_EXISTS_OR_ADD.
func applyHeaderOptions(h *headerMap, opts []*corev3.HeaderValueOption) {
	for _, o := range opts {
		name := strings.ToLower(o.GetHeader().GetKey())
		value := o.GetHeader().GetValue()
		if value == "" {
			value = string(o.GetHeader().GetRawValue())
		}
		if value == "" && !o.GetKeepEmptyValue() {
			continue
		}
		_, exists := h.get(name)
		action := o.GetAppendAction()
		//lint:ignore SA1019 Envoy still honours this deprecated field, so the data plane reads it as Envoy does
		if o.GetAppend() != nil { // the deprecated field wins when set
			action = corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
			//lint:ignore SA1019 Envoy still honours this deprecated field, so the data plane reads it as Envoy does
			if o.GetAppend().GetValue() {
				action = corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD
			}
		}
		switch action {
		case corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD:
			h.add(name, value)
		case corev3.HeaderValueOption_ADD_IF_ABSENT:
			if !exists {
				h.add(name, value)
			}
		case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD:
			h.set(name, value)
		case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS:
			if exists {
				h.set(name, value)
			}
		}
	}
}

// compileFullRegex compiles an RE2 pattern that must match a whole string, as
// Envoy's safe_regex matchers do.
func compileFullRegex(pattern string) (*regexp.Regexp, error) {
	return regexp.Compile(`^(?:` + pattern + `)$`)
}
