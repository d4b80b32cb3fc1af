// Package compat is the conformance suite: every queue behaviour of Azure
// Service Bus that quorumbus implements, driven through the official SDKs
// (the azservicebus Go SDK here, @azure/service-bus in js/) against a whole
// replicated cluster that each test starts, as `quorumbus dev` runs it.
// Durations are shortened through entity properties, never test hooks.
package compat
