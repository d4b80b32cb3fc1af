package sas

import (
	"crypto/rand"
	"encoding/base64"
)

// MaxRulesPerScope bounds the authorization rules of the namespace and of
// each entity: Azure allows 12.
const MaxRulesPerScope = 12

// KeyLength is the length of the keys Azure makes and its admin API
// accepts: 32 bytes in base64, 44 characters.
const KeyLength = 44

// NewKey makes a key as Azure does: 32 random bytes in base64.
func NewKey() string {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand panics rather than return short)
	return base64.StdEncoding.EncodeToString(b[:])
}

// IsAzureKey reports whether key has the form Azure's admin API accepts:
// KeyLength characters of standard base64.
func IsAzureKey(key string) bool {
	if len(key) != KeyLength {
		return false
	}
	_, err := base64.StdEncoding.DecodeString(key)
	return err == nil
}
