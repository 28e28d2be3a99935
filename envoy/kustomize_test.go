package envoy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	k8syaml "sigs.k8s.io/yaml"
)

// The Kubernetes layout is a kustomize base with two overlays. These tests
// render each overlay as `kubectl kustomize` does (kustomize's own library,
// in process), decode every object strictly into the Kubernetes API types
// (an unknown or misspelled field fails), and hold every object to the
// rules an SRE reviews a manifest by.

const kubernetesDir = "../deploy/kubernetes"

// kubernetesOverlays are the overlays under deploy/kubernetes/overlays.
var kubernetesOverlays = []string{"single-node", "fleet", "fleet-asia"}

// rendered is one overlay's output: each object decoded loosely (for the
// layout checks in deploy_test.go) and strictly into its API type.
type rendered struct {
	docs  []doc
	typed []any
}

// renderOverlay runs kustomize on deploy/kubernetes/overlays/name.
func renderOverlay(t *testing.T, name string) rendered {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join(kubernetesDir, "overlays", name))
	if err != nil {
		t.Fatal(err)
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build overlays/%s: %v", name, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	var r rendered
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var d doc
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("overlays/%s output: %v", name, err)
		}
		r.docs = append(r.docs, d)
	}
	for _, res := range m.Resources() {
		y, err := res.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		obj, err := decodeStrict(y)
		if err != nil {
			t.Errorf("overlays/%s: %s %s: %v", name, res.GetKind(), res.GetName(), err)
			continue
		}
		r.typed = append(r.typed, obj)
	}
	if len(r.docs) != len(r.typed) {
		t.Fatalf("overlays/%s: %d documents, %d decoded", name, len(r.docs), len(r.typed))
	}
	return r
}

// apiTypes are the kinds the layouts may use, by apiVersion and kind, with
// a constructor of their Go type.
var apiTypes = map[string]func() any{
	"v1/Namespace":                           func() any { return &corev1.Namespace{} },
	"v1/Service":                             func() any { return &corev1.Service{} },
	"v1/ConfigMap":                           func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                              func() any { return &corev1.Secret{} },
	"v1/ServiceAccount":                      func() any { return &corev1.ServiceAccount{} },
	"v1/PersistentVolumeClaim":               func() any { return &corev1.PersistentVolumeClaim{} },
	"apps/v1/Deployment":                     func() any { return &appsv1.Deployment{} },
	"policy/v1/PodDisruptionBudget":          func() any { return &policyv1.PodDisruptionBudget{} },
	"autoscaling/v2/HorizontalPodAutoscaler": func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
	"networking.k8s.io/v1/NetworkPolicy":     func() any { return &networkingv1.NetworkPolicy{} },
	"networking.k8s.io/v1/Ingress":           func() any { return &networkingv1.Ingress{} },
	"apps/v1/StatefulSet":                    func() any { return &appsv1.StatefulSet{} },
}

// decodeStrict decodes one object into its API type, refusing unknown and
// duplicate fields and values that do not parse (quantities, int-or-string).
func decodeStrict(y []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := k8syaml.Unmarshal(y, &tm); err != nil {
		return nil, err
	}
	mk := apiTypes[tm.APIVersion+"/"+tm.Kind]
	if mk == nil {
		return nil, fmt.Errorf("apiVersion %s kind %s: not a kind the layouts use (add it to apiTypes)", tm.APIVersion, tm.Kind)
	}
	obj := mk()
	if err := k8syaml.UnmarshalStrict(y, obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// TestDecodeStrictRefusesMistakes: the strict decoding is what catches a
// misspelled field, a field at the wrong level and a bad quantity.
func TestDecodeStrictRefusesMistakes(t *testing.T) {
	for name, y := range map[string]string{
		"misspelled field": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replica: 3\n",
		"wrong level":      "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nselector: {a: b}\n",
		"bad quantity":     "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: x}\nspec:\n  resources: {requests: {storage: 1Gb}}\n",
		"unknown kind":     "apiVersion: apps/v1\nkind: Deploymnet\nmetadata: {name: x}\n",
		"duplicate field":  "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\ndata: {c: d}\n",
	} {
		if _, err := decodeStrict([]byte(y)); err == nil {
			t.Errorf("%s: decoded without an error", name)
		}
	}
	if _, err := decodeStrict([]byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replicas: 3}\n")); err != nil {
		t.Errorf("a valid Deployment: %v", err)
	}
}

// TestKubernetesOverlaysRender renders both overlays and checks every
// object against the rules below.
func TestKubernetesOverlaysRender(t *testing.T) {
	for _, overlay := range kubernetesOverlays {
		t.Run(overlay, func(t *testing.T) {
			r := renderOverlay(t, overlay)
			checkSRERules(t, overlay, r.typed)
		})
	}
}

// checkSRERules holds the rendered objects to the production rules: pinned
// images, resources, probes, a locked-down securityContext, a Go memory
// limit under the container's, spread and disruption budgets for every
// Deployment with more than one replica, autoscaling and no volume for
// state in the fleet.
func checkSRERules(t *testing.T, overlay string, objs []any) {
	var (
		deployments []*appsv1.Deployment
		pdbs        []*policyv1.PodDisruptionBudget
		hpas        []*autoscalingv2.HorizontalPodAutoscaler
		claims      []*corev1.PersistentVolumeClaim
		namespace   string
	)
	for _, o := range objs {
		switch o := o.(type) {
		case *appsv1.Deployment:
			deployments = append(deployments, o)
		case *policyv1.PodDisruptionBudget:
			pdbs = append(pdbs, o)
		case *autoscalingv2.HorizontalPodAutoscaler:
			hpas = append(hpas, o)
		case *corev1.PersistentVolumeClaim:
			claims = append(claims, o)
		case *corev1.Namespace:
			namespace = o.Name
		}
	}
	if len(deployments) == 0 {
		t.Fatal("no Deployments")
	}
	for _, o := range objs {
		if m, ok := o.(metav1.Object); ok {
			if _, isNS := o.(*corev1.Namespace); !isNS && m.GetNamespace() != namespace {
				t.Errorf("%T %s in namespace %q, want %q", o, m.GetName(), m.GetNamespace(), namespace)
			}
		}
	}

	for _, d := range deployments {
		name := d.Name
		pod := d.Spec.Template.Spec
		replicas := int32(1)
		if d.Spec.Replicas != nil {
			replicas = *d.Spec.Replicas
		}
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("%s: selector %v does not match its pods' labels %v", name, d.Spec.Selector, d.Spec.Template.Labels)
		}
		if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
			t.Errorf("%s: the pod is not runAsNonRoot", name)
		}
		for _, v := range pod.Volumes {
			if v.HostPath != nil {
				t.Errorf("%s: hostPath volume %s", name, v.Name)
			}
		}
		containers := slices.Concat(pod.InitContainers, pod.Containers)
		for _, c := range containers {
			where := name + "/" + c.Name
			checkImage(t, where, c.Image)
			checkResources(t, where, c)
			checkSecurityContext(t, where, pod.SecurityContext, c.SecurityContext)
			// Every container serves (init containers here are native
			// sidecars), so each is probed for readiness and liveness.
			if c.ReadinessProbe == nil || c.LivenessProbe == nil {
				t.Errorf("%s: readinessProbe %v, livenessProbe %v: want both", where, c.ReadinessProbe != nil, c.LivenessProbe != nil)
			}
			for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
				checkProbePort(t, where, c, p)
			}
		}
		if replicas > 1 {
			if !spreadsAcrossZones(pod.TopologySpreadConstraints, d.Spec.Template.Labels) {
				t.Errorf("%s: %d replicas without a topologySpreadConstraint on topology.kubernetes.io/zone selecting its pods", name, replicas)
			}
			var budget *policyv1.PodDisruptionBudget
			for _, p := range pdbs {
				if s, err := metav1.LabelSelectorAsSelector(p.Spec.Selector); err == nil && s.Matches(labels.Set(d.Spec.Template.Labels)) {
					budget = p
				}
			}
			switch {
			case budget == nil:
				t.Errorf("%s: %d replicas and no PodDisruptionBudget", name, replicas)
			case budget.Spec.MinAvailable != nil && budget.Spec.MinAvailable.IntValue() >= int(replicas):
				t.Errorf("%s: PodDisruptionBudget %s minAvailable %s of %d replicas blocks every eviction", name, budget.Name, budget.Spec.MinAvailable, replicas)
			case budget.Spec.MaxUnavailable != nil && budget.Spec.MaxUnavailable.IntValue() == 0 && budget.Spec.MaxUnavailable.String() == "0":
				t.Errorf("%s: PodDisruptionBudget %s maxUnavailable 0 blocks every eviction", name, budget.Name)
			}
		}
	}
	// Every budget and autoscaler selects something that exists.
	for _, p := range pdbs {
		s, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if err != nil || !slices.ContainsFunc(deployments, func(d *appsv1.Deployment) bool { return s.Matches(labels.Set(d.Spec.Template.Labels)) }) {
			t.Errorf("PodDisruptionBudget %s selects no Deployment's pods", p.Name)
		}
	}
	for _, h := range hpas {
		i := slices.IndexFunc(deployments, func(d *appsv1.Deployment) bool {
			return h.Spec.ScaleTargetRef.Kind == "Deployment" && d.Name == h.Spec.ScaleTargetRef.Name
		})
		if i < 0 {
			t.Errorf("HorizontalPodAutoscaler %s scales %s %s, which is not here", h.Name, h.Spec.ScaleTargetRef.Kind, h.Spec.ScaleTargetRef.Name)
			continue
		}
		d := deployments[i]
		if h.Spec.MinReplicas == nil || d.Spec.Replicas == nil || *h.Spec.MinReplicas != *d.Spec.Replicas || h.Spec.MaxReplicas < *h.Spec.MinReplicas {
			t.Errorf("HorizontalPodAutoscaler %s: min %v max %d, Deployment replicas %v: want min = replicas <= max", h.Name, h.Spec.MinReplicas, h.Spec.MaxReplicas, d.Spec.Replicas)
		}
		// CPU utilisation is relative to the request: every container needs one.
		for _, c := range slices.Concat(d.Spec.Template.Spec.InitContainers, d.Spec.Template.Spec.Containers) {
			if c.Resources.Requests.Cpu().IsZero() {
				t.Errorf("HorizontalPodAutoscaler %s: container %s has no CPU request", h.Name, c.Name)
			}
		}
	}

	replicasOf := func(name string) int32 {
		for _, d := range deployments {
			if d.Name == name && d.Spec.Replicas != nil {
				return *d.Spec.Replicas
			}
		}
		return 0
	}
	switch overlay {
	case "fleet", "fleet-asia":
		for _, name := range []string{"switchyard-envoy", "switchyard-backends"} {
			if r := replicasOf(name); r < 3 {
				t.Errorf("fleet: %s has %d replicas, want at least 3", name, r)
			}
			if !slices.ContainsFunc(hpas, func(h *autoscalingv2.HorizontalPodAutoscaler) bool { return h.Spec.ScaleTargetRef.Name == name }) {
				t.Errorf("fleet: no HorizontalPodAutoscaler for %s", name)
			}
		}
		if r := replicasOf("switchyard-controlplane"); r < 2 {
			t.Errorf("fleet: the control plane has %d replicas, want at least 2", r)
		}
		// No state on volumes: no claim, and no pod mounts one.
		for _, c := range claims {
			t.Errorf("fleet: PersistentVolumeClaim %s: state belongs in PostgreSQL and S3", c.Name)
		}
		for _, d := range deployments {
			for _, v := range d.Spec.Template.Spec.Volumes {
				if v.PersistentVolumeClaim != nil || v.Ephemeral != nil {
					t.Errorf("fleet: %s mounts volume %s from a claim", d.Name, v.Name)
				}
			}
		}
	case "single-node":
		for _, d := range deployments {
			if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
				t.Errorf("single-node: %s has %v replicas, want 1", d.Name, d.Spec.Replicas)
			}
		}
		if len(hpas) != 0 {
			t.Errorf("single-node: %d HorizontalPodAutoscalers", len(hpas))
		}
		for _, c := range claims {
			if !slices.Equal(c.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) {
				t.Errorf("single-node: claim %s access modes %v, want ReadWriteOnce", c.Name, c.Spec.AccessModes)
			}
		}
		// A pod holding a ReadWriteOnce claim is recreated, not rolled: a
		// new pod on another node could not attach it while the old runs.
		for _, d := range deployments {
			for _, v := range d.Spec.Template.Spec.Volumes {
				if v.PersistentVolumeClaim != nil && d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
					t.Errorf("single-node: %s mounts claim %s with strategy %q, want Recreate", d.Name, v.PersistentVolumeClaim.ClaimName, d.Spec.Strategy.Type)
				}
			}
		}
	default:
		t.Fatalf("no rules for overlay %s", overlay)
	}
}

// checkImage: an image names a registry repository and a version tag (or a
// digest), never latest and never a moving -latest tag.
func checkImage(t *testing.T, where, image string) {
	t.Helper()
	ref, digest, _ := strings.Cut(image, "@")
	slash := strings.LastIndex(ref, "/")
	repo, tag, hasTag := ref, "", false
	if i := strings.LastIndex(ref, ":"); i > slash {
		repo, tag, hasTag = ref[:i], ref[i+1:], true
	}
	switch {
	case repo == "switchyard":
		t.Errorf("%s: image %q is the base's placeholder: the kustomization's images: entry did not apply", where, image)
	case digest == "" && !hasTag:
		t.Errorf("%s: image %q has no tag: that is latest", where, image)
	case digest == "" && (tag == "latest" || strings.HasSuffix(tag, "-latest")):
		t.Errorf("%s: image %q is not pinned to a version", where, image)
	}
}

// checkResources: requests and limits of CPU and memory, requests within
// limits, and for Go programs a GOMEMLIMIT below the memory limit.
func checkResources(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	req, lim := c.Resources.Requests, c.Resources.Limits
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		q, ok := req[r]
		l, lok := lim[r]
		if !ok || !lok || q.IsZero() || l.IsZero() {
			t.Errorf("%s: %s request %v limit %v: want both", where, r, req[r], lim[r])
			continue
		}
		if q.Cmp(l) > 0 {
			t.Errorf("%s: %s request %s above its limit %s", where, r, q.String(), l.String())
		}
	}
	var gomem string
	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" {
			gomem = e.Value
		}
	}
	goProgram := strings.Contains(c.Image, "switchyard") || strings.Contains(c.Image, "envoyproxy/ratelimit")
	if !goProgram {
		if gomem != "" {
			t.Errorf("%s: GOMEMLIMIT on a program not written in Go", where)
		}
		return
	}
	if gomem == "" {
		t.Errorf("%s: a Go program without GOMEMLIMIT: its heap grows to the OOM killer", where)
		return
	}
	limit := lim[corev1.ResourceMemory]
	g, err := goMemLimit(gomem)
	if err != nil {
		t.Errorf("%s: GOMEMLIMIT %q: %v", where, gomem, err)
		return
	}
	// Below the limit, with room for what the Go runtime does not count
	// (stacks beyond the heap goal, cgo-free but not free: about 5%).
	if g >= limit.Value() || float64(g) > 0.95*float64(limit.Value()) || float64(g) < 0.7*float64(limit.Value()) {
		t.Errorf("%s: GOMEMLIMIT %s is %.0f%% of the memory limit %s, want 70-95%%", where, gomem, 100*float64(g)/float64(limit.Value()), limit.String())
	}
}

// goMemLimit parses GOMEMLIMIT as the Go runtime does: a number of bytes
// with an optional B, KiB, MiB, GiB or TiB suffix.
func goMemLimit(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			var v int64
			if _, err := fmt.Sscanf(n, "%d", &v); err != nil || fmt.Sprint(v) != n {
				return 0, fmt.Errorf("not a number of %s", u.suffix)
			}
			return v * u.mult, nil
		}
	}
	var v int64
	if _, err := fmt.Sscanf(s, "%d", &v); err != nil || fmt.Sprint(v) != s {
		return 0, errors.New("want a number of bytes with B, KiB, MiB, GiB or TiB")
	}
	return v, nil
}

// checkSecurityContext: non-root, a read-only root filesystem, no privilege
// escalation and every capability dropped.
func checkSecurityContext(t *testing.T, where string, pod *corev1.PodSecurityContext, sc *corev1.SecurityContext) {
	t.Helper()
	if sc == nil {
		t.Errorf("%s: no securityContext", where)
		return
	}
	nonRoot := (sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) || (sc.RunAsNonRoot == nil && pod != nil && pod.RunAsNonRoot != nil && *pod.RunAsNonRoot)
	if !nonRoot {
		t.Errorf("%s: not runAsNonRoot", where)
	}
	if uid := sc.RunAsUser; uid != nil && *uid == 0 {
		t.Errorf("%s: runAsUser 0", where)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: root filesystem not read-only", where)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: allowPrivilegeEscalation not false", where)
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Errorf("%s: privileged", where)
	}
	if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) != 0 {
		t.Errorf("%s: capabilities %v, want drop [ALL] and none added", where, sc.Capabilities)
	}
}

// checkProbePort: a probe's named or numbered port is one the container
// declares.
func checkProbePort(t *testing.T, where string, c corev1.Container, p *corev1.Probe) {
	t.Helper()
	if p == nil {
		return
	}
	var port string
	switch {
	case p.HTTPGet != nil:
		port = p.HTTPGet.Port.String()
	case p.TCPSocket != nil:
		port = p.TCPSocket.Port.String()
	case p.GRPC != nil:
		port = fmt.Sprint(p.GRPC.Port)
	case p.Exec != nil:
		if len(p.Exec.Command) == 0 {
			t.Errorf("%s: an exec probe with no command", where)
		}
		return
	default:
		t.Errorf("%s: a probe with no handler", where)
		return
	}
	if !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == port || fmt.Sprint(cp.ContainerPort) == port }) {
		t.Errorf("%s: probe port %s is not a port of the container", where, port)
	}
}

func spreadsAcrossZones(cs []corev1.TopologySpreadConstraint, podLabels map[string]string) bool {
	for _, c := range cs {
		if c.TopologyKey != corev1.LabelTopologyZone || c.LabelSelector == nil || c.MaxSkew < 1 {
			continue
		}
		if s, err := metav1.LabelSelectorAsSelector(c.LabelSelector); err == nil && s.Matches(labels.Set(podLabels)) {
			return true
		}
	}
	return false
}
