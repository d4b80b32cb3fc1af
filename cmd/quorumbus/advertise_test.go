package main

import (
	"net"
	"testing"
)

func TestAdvertisedAddr(t *testing.T) {
	for _, tt := range []struct {
		advertise string
		bound     *net.TCPAddr
		want      string
		bad       bool
	}{
		{"", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7101}, "127.0.0.1:7101", false},
		{"", &net.TCPAddr{IP: net.IPv4zero, Port: 7101}, "", true},
		{"", &net.TCPAddr{IP: net.IPv6unspecified, Port: 7101}, "", true},
		{"node-1.broker:7101", &net.TCPAddr{IP: net.IPv4zero, Port: 7101}, "node-1.broker:7101", false},
		{"no-port", &net.TCPAddr{IP: net.IPv4zero, Port: 7101}, "", true},
	} {
		got, err := advertisedAddr(tt.advertise, tt.bound)
		if (err != nil) != tt.bad || got != tt.want {
			t.Errorf("advertisedAddr(%q, %v) = %q, %v", tt.advertise, tt.bound, got, err)
		}
	}
}
