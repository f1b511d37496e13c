"""See a prediction: the simulated step as a timeline (`timeline`), and the interactive explorer (`app`)."""
