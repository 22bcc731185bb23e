// Package distill transfers knowledge from a teacher (an ensemble or a larger
// model) into a smaller student with temperature-scaled KL divergence on soft
// targets plus the hard-label loss (Hinton, Vinyals & Dean 2015).
package distill
