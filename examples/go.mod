module examples

go 1.26.0

require github.com/troupe-ml/troupe v0.0.0-00010101000000-000000000000

replace github.com/troupe-ml/troupe => ../
