package charttest

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Object is one rendered object, decoded into its API type.
type Object struct {
	Source string // the template that rendered it ("quorumbus/templates/...")
	Kind   string
	Name   string
	Obj    any // a pointer to the API type, e.g. *appsv1.StatefulSet
	YAML   string
}

// kinds maps apiVersion/kind to a constructor of its Go type. A kind the
// chart renders that is not here fails Decode: add it with its real type.
var kinds = map[string]func() any{
	"v1/Service":                                      func() any { return &corev1.Service{} },
	"v1/ServiceAccount":                               func() any { return &corev1.ServiceAccount{} },
	"v1/ConfigMap":                                    func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                                       func() any { return &corev1.Secret{} },
	"apps/v1/StatefulSet":                             func() any { return &appsv1.StatefulSet{} },
	"apps/v1/Deployment":                              func() any { return &appsv1.Deployment{} },
	"policy/v1/PodDisruptionBudget":                   func() any { return &policyv1.PodDisruptionBudget{} },
	"autoscaling/v2/HorizontalPodAutoscaler":          func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
	"monitoring.coreos.com/v1/ServiceMonitor":         func() any { return &monitoringv1.ServiceMonitor{} },
	"cert-manager.io/v1/Certificate":                  func() any { return &Certificate{} },
	"rbac.authorization.k8s.io/v1/ClusterRole":        func() any { return &rbacv1.ClusterRole{} },
	"rbac.authorization.k8s.io/v1/ClusterRoleBinding": func() any { return &rbacv1.ClusterRoleBinding{} },
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// Decode splits a manifest into objects and decodes each strictly: an
// unknown or misspelt field, a duplicate key, a wrong type, an unknown
// kind, an object without a name, or a document that renders nothing but
// comments is an error.
func Decode(manifest string) ([]Object, error) {
	var out []Object
	var errs []error
	for _, doc := range docSeparator.Split(manifest, -1) {
		source := ""
		body := strings.Builder{}
		for _, line := range strings.Split(doc, "\n") {
			if s, ok := strings.CutPrefix(line, "# Source: "); ok {
				source = s
			}
			if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
				body.WriteString(line)
				body.WriteByte('\n')
			}
		}
		if body.Len() == 0 {
			if source != "" {
				errs = append(errs, fmt.Errorf("%s: renders an empty document", source))
			}
			continue
		}
		o, err := decodeOne(doc)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", source, err))
			continue
		}
		o.Source = source
		out = append(out, o)
	}
	return out, errors.Join(errs...)
}

func decodeOne(doc string) (Object, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
		return Object{}, err
	}
	newObj, ok := kinds[tm.APIVersion+"/"+tm.Kind]
	if !ok {
		return Object{}, fmt.Errorf("kind %s/%s is not one the tests know", tm.APIVersion, tm.Kind)
	}
	obj := newObj()
	// As the API server decodes: field names match case-sensitively
	// (encoding/json alone would take clusterIp for clusterIP), and an
	// unknown or repeated field is an error.
	j, err := yaml.YAMLToJSONStrict([]byte(doc))
	if err != nil {
		return Object{}, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	strictErrs, err := k8sjson.UnmarshalStrict(j, obj, k8sjson.DisallowDuplicateFields, k8sjson.DisallowUnknownFields)
	if err != nil {
		return Object{}, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	if len(strictErrs) > 0 {
		return Object{}, fmt.Errorf("%s: %w", tm.Kind, errors.Join(strictErrs...))
	}
	meta, ok := obj.(metav1.Object)
	if !ok {
		return Object{}, fmt.Errorf("%s has no object metadata", tm.Kind)
	}
	if meta.GetName() == "" {
		return Object{}, fmt.Errorf("%s without a name", tm.Kind)
	}
	return Object{Kind: tm.Kind, Name: meta.GetName(), Obj: obj, YAML: doc}, nil
}

// Find returns the object of that kind and name, or nil.
func Find[T any](objs []Object, kind, name string) *T {
	for _, o := range objs {
		if o.Kind == kind && (name == "" || o.Name == name) {
			if t, ok := o.Obj.(*T); ok {
				return t
			}
		}
	}
	return nil
}

// All returns every object of type T.
func All[T any](objs []Object) []*T {
	var out []*T
	for _, o := range objs {
		if t, ok := o.Obj.(*T); ok {
			out = append(out, t)
		}
	}
	return out
}

// Certificate is the part of cert-manager's Certificate (cert-manager.io/v1)
// that the chart sets. cert-manager's Go module is not among the packages
// this project can use, so these fields are copied from its API reference;
// a field the chart sets that is not here fails strict decoding.
type Certificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              CertificateSpec `json:"spec"`
}

// CertificateSpec is cert-manager's, restricted to what the chart uses.
type CertificateSpec struct {
	SecretName  string           `json:"secretName"`
	Duration    *metav1.Duration `json:"duration,omitempty"`
	RenewBefore *metav1.Duration `json:"renewBefore,omitempty"`
	DNSNames    []string         `json:"dnsNames,omitempty"`
	PrivateKey  *struct {
		Algorithm      string `json:"algorithm,omitempty"`
		Size           int    `json:"size,omitempty"`
		RotationPolicy string `json:"rotationPolicy,omitempty"`
	} `json:"privateKey,omitempty"`
	IssuerRef struct {
		Name  string `json:"name"`
		Kind  string `json:"kind,omitempty"`
		Group string `json:"group,omitempty"`
	} `json:"issuerRef"`
}

// SASRule is one rule of an authorization rules file (docs/security.md).
type SASRule struct {
	Name         string
	Entity       string `json:",omitempty"`
	Rights       []string
	PrimaryKey   string
	SecondaryKey string `json:",omitempty"`
}

// SASRules reads the rules file held under key in a Secret.
func SASRules(s *corev1.Secret, key string) ([]SASRule, error) {
	data, ok := s.Data[key]
	if !ok {
		return nil, fmt.Errorf("Secret %s has no %s", s.Name, key)
	}
	var f struct{ AuthorizationRules []SASRule }
	if err := k8sjson.UnmarshalCaseSensitivePreserveInts(data, &f); err != nil {
		return nil, fmt.Errorf("Secret %s/%s: %w", s.Name, key, err)
	}
	return f.AuthorizationRules, nil
}
