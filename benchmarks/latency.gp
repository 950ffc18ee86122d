# Latency plot: gnuplot -e "csv='results/latency.csv'; png='results/latency.png'" latency.gp
# CSV (bench_latency): variant ("method size"),median_us,p90_us,mean_us,min_us,samples,method,bytes
set terminal pngcairo size 800,500 font ",10" noenhanced
set output png
set datafile separator ","
set datafile columnheaders
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set grid ytics
set title "allreduce, 2 ranks: time per call (method, size)"
set xtics rotate by -45
set ylabel "microseconds (log)"
set logscale y 10
set key top left
plot csv using 2:xtic(1) title "median", '' using 3 title "p90", '' using 5 title "min"
