// Package policy holds the built-in path selection policies of intents.
//
// A policy gets the permitted paths (preferences already applied, so no
// policy can pick a prohibited path) and returns its choices best first,
// with a short reason. Set one in intents.Config.Policy.
package policy
