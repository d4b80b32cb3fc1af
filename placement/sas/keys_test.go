package sas

import (
	"strings"
	"testing"
)

// TestNewKey: keys are Azure's shape (32 bytes of base64, 44 characters)
// and differ; IsAzureKey tells that shape from others.
func TestNewKey(t *testing.T) {
	a, b := NewKey(), NewKey()
	if !IsAzureKey(a) || !IsAzureKey(b) || a == b {
		t.Fatalf("keys %d and %d characters, equal: %t", len(a), len(b), a == b)
	}
	for _, k := range []string{"", "SAS_KEY_VALUE", a[:43], a + "=", strings.Repeat("!", KeyLength), strings.Repeat("A", 42) + " ="} {
		if IsAzureKey(k) {
			t.Errorf("IsAzureKey(%q) = true", k)
		}
	}
}
